//! `--insecure-plaintext`: the one switch that lets a store member, a
//! router or a node speak plaintext on its internal links (decision 0099).
//! Without it a role needs its certificate (`--tls-*`), and every link it
//! is given must be TLS: `https://`, or scheme-less (`host:port`), which
//! means TLS when the role has a certificate. Bad combinations are
//! configuration errors: the process exits 64 before anything binds.

/// Checks a role's links: `tls` whether it was given its certificate,
/// `insecure` the flag, `links` every internal URL or address it would
/// dial. With the flag, says loudly that it is on.
pub fn check_links<'a>(
    role: &str,
    tls: bool,
    insecure: bool,
    links: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> anyhow::Result<()> {
    match (tls, insecure) {
        (true, true) => anyhow::bail!("--insecure-plaintext and --tls-* exclude each other"),
        (false, false) => anyhow::bail!(
            "mutual TLS is required on a {role}'s internal links: give --tls-ca, --tls-cert and \
             --tls-key (`once certs issue --role {role}`), or --insecure-plaintext for development"
        ),
        (false, true) => {
            let warning = format!(
                "INSECURE: --insecure-plaintext: this {role} speaks plaintext on its internal \
                 links and checks no caller's certificate: anyone who reaches it is let in, and \
                 whoever watches the network reads every key and record it carries. \
                 Development only."
            );
            eprintln!("WARNING: {warning}");
            tracing::warn!("{warning}");
            Ok(())
        }
        (true, false) => {
            if let Some((flag, link)) = links.into_iter().find(|(_, link)| is_plaintext(link)) {
                anyhow::bail!(
                    "{flag} {link} is plaintext: a {role} with a certificate speaks mutual TLS on \
                     every internal link; give https:// (or host:port), or --insecure-plaintext \
                     without --tls-* for development"
                );
            }
            Ok(())
        }
    }
}

/// Whether `link` (`URL`, `host:port`, or either after `NAME=`) names
/// plain HTTP.
fn is_plaintext(link: &str) -> bool {
    let plain = |url: &str| url.trim().to_ascii_lowercase().starts_with("http://");
    plain(link) || link.split_once('=').is_some_and(|(_, url)| plain(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_needs_the_flag_and_the_flag_excludes_a_certificate() {
        let https = [
            ("--nodes", "https://10.0.0.5:8080"),
            ("--store-endpoints", "m1:7101"),
        ];
        let http = [("--nodes", "eu=http://10.0.0.5:8080")];
        assert!(check_links("router", true, false, https).is_ok());
        let refused = check_links("router", true, false, http).unwrap_err();
        assert!(refused.to_string().contains("is plaintext"), "{refused}");
        let refused = check_links("router", false, false, https).unwrap_err();
        assert!(
            refused.to_string().contains("--insecure-plaintext"),
            "{refused}"
        );
        assert!(check_links("router", true, true, https).is_err());
        assert!(check_links("router", false, true, http).is_ok());
    }
}
