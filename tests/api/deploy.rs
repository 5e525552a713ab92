//! The Kubernetes manifests run the binary they ship with. For every region
//! overlay, `kubectl kustomize` renders the manifests; each container's
//! command, args and env (ConfigMap values resolved, `$(VAR)` expanded as
//! the kubelet would, Secrets replaced by placeholders) then go through
//! `once <role> … --check-config`. A flag or variable renamed in the code
//! breaks this test instead of a rollout.
//!
//! Two lists keep work in flight honest:
//! - [`PENDING_ROLES`]: roles the manifests deploy whose subcommand is not on
//!   this branch yet. They are skipped with a message; once the binary has
//!   the role, the test fails until the entry is removed, so the manifest
//!   starts being checked the day the role lands.
//! - the `once.dev/pending-args` pod annotation: flags of an existing role
//!   that are not in the binary yet. The test fails as soon as one of them
//!   exists, asking for it to move into `args`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use once_test_support::services::present_or_skipped;
use serde::Deserialize;
use serde_json::Value;

use crate::helpers::ONCE;

pub(crate) const OVERLAYS: &[&str] = &["eu-west", "us-east", "ap-south"];

/// Roles deployed by the manifests but not subcommands of this binary yet,
/// with what they are waiting for.
const PENDING_ROLES: &[(&str, &str)] = &[];

/// Roles that must be checked in every overlay, so the test cannot pass by
/// checking nothing.
const REQUIRED_ROLES: &[&str] = &["node", "migrate", "store", "router"];

const PENDING_ARGS: &str = "once.dev/pending-args";

/// Secrets a role reads from its environment only, never from a flag (a
/// command line shows in `ps`); each role's `--help` names them.
const ENVIRONMENT_ONLY: &[&str] = &["ONCE_ADMIN_TOKEN"];

/// Placeholder values for variables that come from Secrets: harmless, and
/// recognisable if one ever leaks into `--check-config` output.
const SECRET_PLACEHOLDER: &str = "placeholder-secret-value";
const DATABASE_URL_PLACEHOLDER: &str =
    "postgres://once:placeholder-secret-value@db.invalid:5432/once";

/// Files of mounted Secrets, by key: a key file needs a well-formed line.
fn secret_file_placeholder(key: &str) -> String {
    match key {
        "keys" => format!("placeholder:placeholder:{}\n", "0".repeat(64)),
        // The node checks its data key file at `--check-config`.
        "data-keys" => once_seal::KeyRing::generate().to_file_text().to_string(),
        _ => format!("{SECRET_PLACEHOLDER}\n"),
    }
}

/// A `once-tls-<role>` Secret's files (`once certs issue` output: `ca.pem`,
/// `cert.pem`, `key.pem`), issued for the role by a throwaway CA: the
/// binary loads them, so placeholders would not do.
fn tls_secret(name: &str) -> Option<BTreeMap<String, String>> {
    let role: once_tls::Role = name.strip_prefix("once-tls-")?.parse().ok()?;
    let dir = tempfile::tempdir().unwrap();
    let ca = once_tls::LocalCa::create(dir.path(), "deploy test CA").unwrap();
    let identity = once_tls::Identity::new("deploy-test", role).unwrap();
    let issued = ca.issue(&identity, &[], &[]).unwrap();
    Some(BTreeMap::from([
        ("ca.pem".to_owned(), issued.ca_pem.clone()),
        ("cert.pem".to_owned(), issued.cert_pem.clone()),
        ("key.pem".to_owned(), issued.key_pem.clone()),
    ]))
}

pub(crate) fn kubectl_available() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    present_or_skipped(
        found,
        "CI must install kubectl so the manifests are checked (.ci/run)",
        "kubectl not found: skipping the manifest check",
    )
}

pub(crate) fn render(overlay: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/k8s/overlays")
        .join(overlay);
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("running kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("kustomize output is UTF-8");
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("rendered manifest is YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

pub(crate) fn array_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The pod template of a workload, if the object is one.
fn pod_template(object: &Value) -> Option<&Value> {
    match str_at(object, "/kind")? {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            object.pointer("/spec/template")
        }
        "CronJob" => object.pointer("/spec/jobTemplate/spec/template"),
        "Pod" => Some(object),
        _ => None,
    }
}

/// What `once <role> --help` says: `None` if the binary has no such role.
fn role_help(role: &str) -> Option<String> {
    let out = Command::new(ONCE)
        .args([role, "--help"])
        .env_clear()
        .output()
        .expect("running once --help");
    if out.status.success() {
        return Some(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unrecognized subcommand"),
        "once {role} --help failed unexpectedly: {stderr}"
    );
    None
}

/// True if `--help` documents `flag` (`--store-endpoints`, not `--store`).
fn help_has_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let next = help[at + flag.len()..].chars().next();
        !matches!(next, Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// Expands `$(VAR)` the way the kubelet does; `$$` escapes. An undefined
/// variable is a typo the kubelet would pass through literally: fail.
fn expand(text: &str, env: &BTreeMap<String, String>, what: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(close) = rest.strip_prefix("$(").and_then(|r| r.find(')')) {
            let name = &rest[2..2 + close];
            let value = env.get(name).unwrap_or_else(|| {
                panic!("{what}: $({name}) is not defined in the container's env")
            });
            out.push_str(value);
            rest = &rest[3 + close..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// A container as the kubelet would start it, ready to run locally.
struct Launch {
    role: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    pending_args: Vec<String>,
    /// Mounted volumes moved under here; kept alive for the run.
    _root: tempfile::TempDir,
}

fn resolve_container(
    what: &str,
    container: &Value,
    workload: &Value,
    pod: &Value,
    config_maps: &BTreeMap<String, BTreeMap<String, String>>,
) -> Launch {
    let command: Vec<&str> = array_at(container, "/command")
        .iter()
        .map(|c| c.as_str().expect("command entries are strings"))
        .collect();
    // No command: the image's entrypoint, which is `once` (deploy/Dockerfile).
    if let Some(program) = command.first() {
        assert_eq!(
            Path::new(program).file_name().and_then(|n| n.to_str()),
            Some("once"),
            "{what}: runs {program:?}, not the once binary"
        );
    }

    let mut env = BTreeMap::new();
    for var in array_at(container, "/env") {
        let name = str_at(var, "/name")
            .expect("env entries have a name")
            .to_owned();
        let value = if let Some(value) = str_at(var, "/value") {
            expand(value, &env, what)
        } else if let Some(cm) = var.pointer("/valueFrom/configMapKeyRef") {
            let (map, key) = (str_at(cm, "/name").unwrap(), str_at(cm, "/key").unwrap());
            match config_maps.get(map).and_then(|data| data.get(key)) {
                Some(value) => value.clone(),
                // As the kubelet does: an optional key that is absent
                // leaves the variable unset.
                None if cm.get("optional").and_then(Value::as_bool) == Some(true) => continue,
                None => panic!(
                    "{what}: env {name} wants ConfigMap {map} key {key}, which the overlay does not render"
                ),
            }
        } else if var.pointer("/valueFrom/secretKeyRef").is_some() {
            match name.as_str() {
                "ONCE_DATABASE_URL" => DATABASE_URL_PLACEHOLDER.to_owned(),
                _ => SECRET_PLACEHOLDER.to_owned(),
            }
        } else {
            // fieldRef / resourceFieldRef: known only on a real cluster.
            "placeholder".to_owned()
        };
        env.insert(name, value);
    }
    assert!(
        array_at(container, "/envFrom").is_empty(),
        "{what}: envFrom hides which variables a container gets; list them in env"
    );

    // Every mount moves under a temp dir; Secret and ConfigMap volumes get
    // their files (placeholders for Secrets).
    let root = tempfile::tempdir().expect("temp dir");
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in array_at(container, "/volumeMounts") {
        let name = str_at(mount, "/name").unwrap();
        let path = str_at(mount, "/mountPath").unwrap();
        let local = root.path().join(name);
        std::fs::create_dir_all(&local).unwrap();
        let volume = array_at(pod, "/spec/volumes")
            .iter()
            .find(|v| str_at(v, "/name") == Some(name));
        // A StatefulSet's claim templates are volumes too (empty ones here).
        let claimed = array_at(workload, "/spec/volumeClaimTemplates")
            .iter()
            .any(|c| str_at(c, "/metadata/name") == Some(name));
        assert!(
            volume.is_some() || claimed,
            "{what}: mounts undeclared volume {name}"
        );
        if let Some(secret) = volume.and_then(|v| v.get("secret")) {
            let certificates = str_at(secret, "/secretName").and_then(tls_secret);
            for item in array_at(secret, "/items") {
                let key = str_at(item, "/key").unwrap();
                let file = str_at(item, "/path").unwrap();
                let contents = certificates
                    .as_ref()
                    .and_then(|files| files.get(key).cloned())
                    .unwrap_or_else(|| secret_file_placeholder(key));
                std::fs::write(local.join(file), contents).unwrap();
                // The mode Kubernetes gives the file (its default 0644):
                // roles refuse key files other users may read.
                let mode = item
                    .get("mode")
                    .or_else(|| secret.get("defaultMode"))
                    .and_then(Value::as_u64)
                    .map_or(0o644, |m| m as u32);
                std::fs::set_permissions(
                    local.join(file),
                    std::os::unix::fs::PermissionsExt::from_mode(mode),
                )
                .unwrap();
            }
        } else if let Some(cm) = volume.and_then(|v| v.get("configMap")) {
            let map = str_at(cm, "/name").unwrap();
            for (key, value) in config_maps.get(map).into_iter().flatten() {
                std::fs::write(local.join(key), value).unwrap();
            }
        }
        mounts.push((path.to_owned(), local));
    }
    // Longest mount path first, so /a/b wins over /a.
    mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    let relocate = |text: String| -> String {
        for (path, local) in &mounts {
            if let Some(at) = text.find(path.as_str()) {
                return format!(
                    "{}{}{}",
                    &text[..at],
                    local.display(),
                    &text[at + path.len()..]
                );
            }
        }
        text
    };

    let mut args: Vec<String> = command
        .iter()
        .skip(1)
        .map(|s| (*s).to_owned())
        .chain(
            array_at(container, "/args")
                .iter()
                .map(|a| a.as_str().expect("args are strings").to_owned()),
        )
        .map(|a| relocate(expand(&a, &env, what)))
        .collect();
    let env = env.into_iter().map(|(k, v)| (k, relocate(v))).collect();
    assert!(!args.is_empty(), "{what}: no role argument");
    let role = args.remove(0);

    let pending_args = str_at(
        pod,
        &format!("/metadata/annotations/{}", PENDING_ARGS.replace('/', "~1")),
    )
    .map(|text| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default();

    Launch {
        role,
        args,
        env,
        pending_args,
        _root: root,
    }
}

/// Runs one container's configuration through `--check-config`.
fn check_launch(what: &str, launch: &Launch, help: &str) {
    for arg in &launch.pending_args {
        let flag = arg.split(['=', ' ']).next().unwrap();
        assert!(
            !help_has_flag(help, flag),
            "{what}: `once {}` now has {flag}: move it from the {PENDING_ARGS} annotation into args",
            launch.role
        );
    }
    for name in launch.env.keys().filter(|n| n.starts_with("ONCE_")) {
        assert!(
            help.contains(&format!("env: {name}"))
                || (ENVIRONMENT_ONLY.contains(&name.as_str())
                    && help.contains(&format!("{name} (environment only)"))),
            "{what}: sets {name}, which `once {}` does not read",
            launch.role
        );
    }

    let out = Command::new(ONCE)
        .arg(&launch.role)
        .args(&launch.args)
        .arg("--check-config")
        // Only what the pod would have: nothing from the developer's shell
        // (ONCE_API_KEYS, say) may make a broken manifest pass.
        .env_clear()
        .envs(&launch.env)
        .output()
        .expect("running once --check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: `once {} {} --check-config` exited {}: {}{}",
        launch.role,
        launch.args.join(" "),
        out.status,
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let config: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{what}: --check-config printed no JSON ({e}): {stdout}"));
    assert_eq!(config["role"], launch.role.as_str(), "{what}: {config}");
    assert!(
        !stdout.contains(SECRET_PLACEHOLDER),
        "{what}: --check-config printed a secret: {stdout}"
    );
}

#[test]
fn every_container_in_every_region_starts_with_flags_the_binary_accepts() {
    if !kubectl_available() {
        return;
    }
    let pending: BTreeMap<&str, &str> = PENDING_ROLES.iter().copied().collect();
    let mut helps: BTreeMap<String, Option<String>> = BTreeMap::new();

    for overlay in OVERLAYS {
        let objects = render(overlay);
        let config_maps: BTreeMap<String, BTreeMap<String, String>> = objects
            .iter()
            .filter(|o| str_at(o, "/kind") == Some("ConfigMap"))
            .map(|o| {
                let data = o
                    .get("data")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                (str_at(o, "/metadata/name").unwrap().to_owned(), data)
            })
            .collect();

        let mut checked = BTreeSet::new();
        for object in &objects {
            let Some(pod) = pod_template(object) else {
                continue;
            };
            let workload = format!(
                "{overlay}: {}/{}",
                str_at(object, "/kind").unwrap(),
                str_at(object, "/metadata/name").unwrap()
            );
            let containers = array_at(pod, "/spec/initContainers")
                .iter()
                .chain(array_at(pod, "/spec/containers"));
            for container in containers {
                let what = format!(
                    "{workload} container {}",
                    str_at(container, "/name").unwrap()
                );
                let launch = resolve_container(&what, container, object, pod, &config_maps);
                let help = helps
                    .entry(launch.role.clone())
                    .or_insert_with(|| role_help(&launch.role));
                match (help, pending.get(launch.role.as_str())) {
                    (None, Some(waiting_for)) => {
                        eprintln!(
                            "{what}: SKIPPED, pending their role: `once {}` is not in this binary yet ({waiting_for})",
                            launch.role
                        );
                    }
                    (None, None) => panic!(
                        "{what}: runs `once {}`, which this binary does not have (and it is not in PENDING_ROLES)",
                        launch.role
                    ),
                    (Some(_), Some(_)) => panic!(
                        "{what}: `once {}` exists now: remove it from PENDING_ROLES in tests/api/deploy.rs so its manifest is checked",
                        launch.role
                    ),
                    (Some(help), None) => {
                        check_launch(&what, &launch, help);
                        checked.insert(launch.role.clone());
                    }
                }
            }
        }
        for role in REQUIRED_ROLES {
            assert!(
                checked.contains(*role),
                "{overlay}: no `once {role}` container was checked"
            );
        }
    }
}

#[test]
fn kubelet_style_expansion() {
    let env = BTreeMap::from([("REGION".to_owned(), "eu-west".to_owned())]);
    assert_eq!(expand("--region=$(REGION)", &env, "t"), "--region=eu-west");
    assert_eq!(expand("cost $$(REGION) $5", &env, "t"), "cost $(REGION) $5");
    assert!(help_has_flag(
        "  --store-endpoints <URL>",
        "--store-endpoints"
    ));
    assert!(!help_has_flag("  --store-endpoints <URL>", "--store"));
}

/// The groups of decision 0063 as the overlays configure them: every region
/// runs the same groups, directory home and member regions; the groups and
/// the directory's home are the regions, each once; and each region's
/// store member is the one `store-peer-regions` places there. A region
/// missing from the groups would have its tenants kept in the directory,
/// led from elsewhere; members that disagree would found different groups.
#[test]
fn every_region_runs_a_group_per_home_region_led_from_its_own_member() {
    if !kubectl_available() {
        return;
    }
    let mut agreed: Option<[String; 3]> = None;
    let mut member_regions = BTreeMap::new();
    for overlay in OVERLAYS {
        let config = render(overlay)
            .into_iter()
            .find(|o| {
                str_at(o, "/kind") == Some("ConfigMap")
                    && str_at(o, "/metadata/name").is_some_and(|n| n.starts_with("once-config"))
            })
            .expect("the overlay renders once-config");
        let value = |key: &str| {
            str_at(&config, &format!("/data/{key}"))
                .unwrap_or_else(|| panic!("{overlay}: once-config has no {key}"))
                .to_owned()
        };
        assert_eq!(value("region"), *overlay);
        let these = [
            value("store-groups"),
            value("store-directory-home"),
            value("store-peer-regions"),
        ];
        if let Some(first) = &agreed {
            assert_eq!(&these, first, "{overlay} disagrees with {}", OVERLAYS[0]);
        }
        member_regions.insert(value("store-id"), value("region"));
        agreed = Some(these);
    }
    let [groups, home, peer_regions] = agreed.expect("overlays");
    let mut homes: Vec<&str> = groups.split(',').chain([home.as_str()]).collect();
    homes.sort_unstable();
    let mut regions = OVERLAYS.to_vec();
    regions.sort_unstable();
    assert_eq!(homes, regions, "groups {groups} and directory home {home}");
    let placed: BTreeMap<String, String> = peer_regions
        .split(',')
        .map(|pair| {
            let (id, region) = pair.split_once('=').expect("id=region");
            (id.to_owned(), region.to_owned())
        })
        .collect();
    assert_eq!(
        placed, member_regions,
        "store-peer-regions vs each overlay's store-id"
    );
}
