//! What the replicated log carries and what applying it answers: the
//! commands of the state machine (claim, complete, take over, placement …),
//! the records they act on, and the envelope that makes every client command
//! deduplicated by `(client id, sequence)`.
//!
//! The record model is defined once, here (DESIGN §4;
//! docs/decisions/0027-one-record-model.md): [`Status`], [`Step`] and
//! [`StoredResponse`] are the very types the node's idempotency engine and
//! its `sql` mode use, with the canonical names the `sql` mode stores
//! (`IN_PROGRESS` …). The node keeps its own `Record` and `Scope` only
//! because they carry its validated domain types (tenant, principal, key,
//! payment id, time); it parses [`Record`] into them at the boundary
//! (`node/src/raft/convert.rs`). The record rules both sides judge by
//! ([`lease_expired`], [`is_expired`]) are written once, here, on plain
//! numbers.
//!
//! Encryption at rest (docs/decisions/0031-encryption-at-rest.md): the
//! node seals every stored answer and command payload before it is
//! proposed ([`Sealed`]), and sends business keys as keyed digests
//! ([`BusinessKey`]), so the log, the state machine and the snapshots only
//! ever hold ciphertext and raft-store never needs a key.
//!
//! Everything here is plain data: time is a number the leader stamped
//! (`ClientRequest::now`), never a clock read during apply, so every member
//! applying the same log reaches the same state. The serde form of every
//! type is what the Raft log, the snapshots and the client wire carry
//! (postcard), so it must not change: an enum serializes as its variant,
//! never as its canonical name (`tests::the_serde_form_is_pinned`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as stamped by the leader.
pub type Millis = i64;

/// The key an idempotency record is unique in: `(tenant, principal,
/// operation, key)` (the node's scope; see docs/ARCHITECTURE.md for why the
/// principal is part of it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Scope {
    pub tenant: String,
    pub principal: String,
    pub operation: String,
    pub key: String,
}

/// The business key a payment reserves: `(tenant, account, merchant
/// reference)`. At most one payment holds it, across every region (I1).
///
/// The node sends `account_id` and `merchant_reference` as keyed digests
/// (hex HMAC-SHA256 under the cluster's fixed digest key, `once-seal`):
/// raft-store only compares them, and never learns the values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BusinessKey {
    pub tenant: String,
    pub account_id: String,
    pub merchant_reference: String,
}

/// An enum with a canonical name per variant: `as_str`, [`fmt::Display`]
/// and [`FromStr`] use the name; serde and `Debug` keep the variant's
/// identifier.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $s:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every variant, in declaration order (the serde order).
            pub const ALL: &[Self] = &[$(Self::$variant),+];

            /// The canonical name, as the `sql` mode stores it.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok(Self::$variant),)+
                    other => Err(format!("unknown {} {other:?}", stringify!($name))),
                }
            }
        }
    };
}

named_enum! {
    /// Where the operation stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Status {
        InProgress => "IN_PROGRESS",
        Completed => "COMPLETED",
        FailedReplayable => "FAILED_REPLAYABLE",
        FailedRetryable => "FAILED_RETRYABLE",
        UnknownRequiresRecovery => "UNKNOWN_REQUIRES_RECOVERY",
        Expired => "EXPIRED",
    }
}

impl Status {
    /// Unfinished records: the only ones an owner may still write.
    pub fn is_unfinished(self) -> bool {
        matches!(self, Self::InProgress | Self::UnknownRequiresRecovery)
    }

    /// Finished with a stored answer that is replayed verbatim and never
    /// changes inside the replay window (raft-store's "final" records, which
    /// any member may serve).
    pub fn is_replayable(self) -> bool {
        matches!(self, Self::Completed | Self::FailedReplayable)
    }

    /// Records that may reach the end of their replay window. Unfinished
    /// records never expire: expiring one would let an uncertain operation
    /// run a second time.
    pub fn can_expire(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::FailedReplayable | Self::FailedRetryable
        )
    }
}

named_enum! {
    /// The last recovery point reached; a takeover resumes from here. Steps
    /// only move forward, in declaration order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum Step {
        Received => "RECEIVED",
        LocalPaymentCreated => "LOCAL_PAYMENT_CREATED",
        ProviderRequestSent => "PROVIDER_REQUEST_SENT",
        ProviderConfirmed => "PROVIDER_CONFIRMED",
        Completed => "COMPLETED",
    }
}

/// Ciphertext the node sealed (`once-seal`'s envelope: format version,
/// key id, nonce, ciphertext and tag), bound to its record's scope.
/// raft-store stores, compares and drops it; it never opens one.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sealed(pub Vec<u8>);

impl Sealed {
    /// The id of the key it is sealed under, read without any key (`None`
    /// for bytes that are not a sealed blob).
    pub fn key_id(&self) -> Option<&str> {
        once_seal::key_id_of(&self.0).ok()
    }

    /// Seals `answer` for the record at `scope` (its postcard form).
    pub fn seal_answer(ring: &once_seal::KeyRing, scope: &Scope, answer: &StoredResponse) -> Self {
        let plain = postcard::to_allocvec(answer).expect("an answer always serializes");
        Self(ring.seal(&plain, &scope.associated_data(SealedField::Answer)))
    }

    /// Opens a stored answer of the record at `scope`.
    pub fn open_answer(
        &self,
        ring: &once_seal::KeyRing,
        scope: &Scope,
    ) -> Result<StoredResponse, once_seal::SealError> {
        let plain = ring.open(&self.0, &scope.associated_data(SealedField::Answer))?;
        postcard::from_bytes(&plain)
            .map_err(|_| once_seal::SealError::Format("the opened blob is not a stored answer"))
    }
}

/// Which field of a record a sealed blob holds: part of its associated
/// data, so a blob copied into another field does not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedField {
    /// The stored answer ([`StoredResponse`]).
    Answer,
    /// The command's facts ([`Record::payload`]).
    Payload,
}

impl Scope {
    /// The associated data of a blob of `field` in the record at this
    /// scope: the field and the four parts, each length-prefixed so no two
    /// scopes share an encoding. Binds a blob to its record.
    pub fn associated_data(&self, field: SealedField) -> Vec<u8> {
        let label: &[u8] = match field {
            SealedField::Answer => b"once/answer",
            SealedField::Payload => b"once/payload",
        };
        let mut ad = Vec::new();
        for part in [
            label,
            self.tenant.as_bytes(),
            self.principal.as_bytes(),
            self.operation.as_bytes(),
            self.key.as_bytes(),
        ] {
            ad.extend_from_slice(&(part.len() as u32).to_be_bytes());
            ad.extend_from_slice(part);
        }
        ad
    }
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealed({} bytes", self.0.len())?;
        if let Some(id) = self.key_id() {
            write!(f, " under {id}")?;
        }
        f.write_str(")")
    }
}

/// A response as it was first sent, kept to be replayed byte for byte.
/// The node seals its postcard form ([`Sealed`]) before storing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    /// Semantic headers only (`Location`, `Content-Type`), in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The response schema the body was rendered with.
    pub schema_version: i32,
}

/// Whether a lease held until `locked_until` has run out at `now` (the
/// moment it names is already past it). The node decides to take over and
/// raft-store grants the takeover by this one rule, so they never disagree
/// at the boundary.
pub fn lease_expired(locked_until: Millis, now: Millis) -> bool {
    locked_until <= now
}

/// Whether a record in `status` whose replay window ends at `expires_at`
/// is past that window at `now`, whether or not the sweeper got to it yet.
pub fn is_expired(status: Status, expires_at: Option<Millis>, now: Millis) -> bool {
    status == Status::Expired || (status.can_expire() && expires_at.is_some_and(|at| at <= now))
}

/// The idempotency record as raft-store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    pub status: Status,
    pub step: Step,
    /// The fencing token: bumped by every takeover, presented by every owner
    /// write (I6).
    pub fence: u64,
    pub locked_until: Millis,
    pub payment_id: Option<String>,
    pub provider_key: Option<String>,
    pub business_key: Option<BusinessKey>,
    /// The operation's facts, sealed (the node keeps the payment it
    /// creates here), so whichever region takes the record over can finish
    /// it and materialize the payment in its own database. Dropped with the
    /// answer when the record expires.
    pub payload: Option<Sealed>,
    /// The sealed [`StoredResponse`]: present when `status.is_replayable()`,
    /// until the record expires.
    pub response: Option<Sealed>,
    pub error_code: Option<String>,
    pub trace_id: Option<String>,
    pub region: String,
    pub takeovers: i32,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub expires_at: Option<Millis>,
    /// After expiry: when the metadata itself may be purged.
    pub purge_after: Option<Millis>,
}

impl Record {
    /// See [`lease_expired`].
    pub fn lease_expired(&self, now: Millis) -> bool {
        lease_expired(self.locked_until, now)
    }

    /// See [`is_expired`].
    pub fn is_expired(&self, now: Millis) -> bool {
        is_expired(self.status, self.expires_at, now)
    }
}

/// A tenant's home region, its ordered standbys and the epoch that every
/// placement change bumps (DESIGN §6).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    pub home: String,
    pub standbys: Vec<String>,
    pub epoch: u64,
    /// The home the tenant was first placed in: where failback returns it.
    pub preferred_home: String,
}

impl Placement {
    /// The placement a failover away from `failed` proposes: the first
    /// standby that is not `failed` and that `eligible` accepts becomes
    /// home; the other standbys keep their order, and the failed region
    /// goes last (it is the least attractive standby, but once it recovers
    /// it is still one). `None`: no standby may take the tenant. The one
    /// rule of the router's decision and raft-store's bulk move
    /// ([`Op::MoveRegion`]).
    pub fn failover_target(
        &self,
        failed: &str,
        eligible: impl Fn(&str) -> bool,
    ) -> Option<(String, Vec<String>)> {
        let home = self
            .standbys
            .iter()
            .find(|s| s.as_str() != failed && eligible(s))?
            .clone();
        let mut standbys: Vec<String> = self
            .standbys
            .iter()
            .filter(|s| **s != home && s.as_str() != failed)
            .cloned()
            .collect();
        standbys.push(failed.to_owned());
        Some((home, standbys))
    }

    /// This placement moved to `home` and `standbys` (a failover or failback
    /// target), one epoch on, keeping its preferred home.
    pub fn moved_to(&self, (home, standbys): (String, Vec<String>)) -> Placement {
        Placement {
            home,
            standbys,
            epoch: self.epoch + 1,
            preferred_home: self.preferred_home.clone(),
        }
    }

    /// The placement a failback proposes: home is the preferred home again;
    /// the region it leaves becomes the first standby, the others keep
    /// their order.
    pub fn failback_target(&self) -> (String, Vec<String>) {
        let home = self.preferred_home.clone();
        let mut standbys = vec![self.home.clone()];
        for s in &self.standbys {
            if *s != home && !standbys.contains(s) {
                standbys.push(s.clone());
            }
        }
        (home, standbys)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionStatus {
    Healthy,
    Draining,
    Down,
}

/// What a claim wants to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewClaim {
    pub scope: Scope,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    /// Reserved atomically with the scoped key when present.
    pub business_key: Option<BusinessKey>,
    pub payment_id: Option<String>,
    pub provider_key: Option<String>,
    /// The step the record starts at.
    pub step: Step,
    /// Sealed facts stored with the record (see [`Record::payload`]).
    pub payload: Option<Sealed>,
    pub trace_id: Option<String>,
    /// The claiming region and the placement epoch it believes in.
    pub region: String,
    pub epoch: u64,
    pub lease_ms: i64,
}

/// How a takeover justifies itself; each is a compare-and-set on `fence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TakeOverKind {
    /// The owner's lease ran out (per the command's stamped time).
    LeaseExpired,
    /// `FAILED_RETRYABLE`: run again under the same record.
    Restart,
    /// Past the replay window: a new operation under the same key.
    Renew,
}

/// One state-machine command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Claim(NewClaim),
    /// Finish as `COMPLETED` with the answer to replay. Fenced.
    Complete {
        scope: Scope,
        fence: u64,
        response: Sealed,
        /// The replay window, from the leader's stamp: the record expires
        /// this many milliseconds after the write applies.
        expires_after_ms: i64,
    },
    /// Finish as failed: `replayable` stores an answer (business rejection),
    /// otherwise the operation may run again (`FAILED_RETRYABLE`). Fenced.
    Fail {
        scope: Scope,
        fence: u64,
        replayable: bool,
        response: Option<Sealed>,
        error_code: Option<String>,
        /// The replay window, from the leader's stamp: the record expires
        /// this many milliseconds after the write applies.
        expires_after_ms: i64,
    },
    /// Record a recovery point. Fenced; steps only move forward.
    AdvanceStep {
        scope: Scope,
        fence: u64,
        step: Step,
    },
    /// Fenced takeover; bumps the fence and grants a new lease.
    TakeOver {
        scope: Scope,
        fence: u64,
        kind: TakeOverKind,
        region: String,
        lease_ms: i64,
        /// The command to attach: always replaces the operation on `Renew`;
        /// on `LeaseExpired` and `Restart` it is attached only when the
        /// record has no payment yet (a claim cut off after losing its
        /// business key). Attaching reserves the business key.
        renew: Option<NewClaim>,
    },
    /// The provider's answer was lost: nobody resumes for `retry_after_ms`
    /// after the leader's stamp. Fenced.
    MarkUnknown {
        scope: Scope,
        fence: u64,
        retry_after_ms: i64,
    },
    /// Recovery learned the outcome of an unknown operation. Fenced.
    Resolve {
        scope: Scope,
        fence: u64,
        completed: bool,
        response: Sealed,
        /// The replay window, from the leader's stamp: the record expires
        /// this many milliseconds after the write applies.
        expires_after_ms: i64,
    },
    /// Purge stored answers of up to `limit` records past their window.
    Expire {
        limit: u32,
        retention_ms: i64,
    },
    /// Delete up to `limit` expired records past their retention.
    Purge {
        limit: u32,
    },
    /// Compare-and-set a tenant's placement on its epoch (`expected_epoch` 0:
    /// the tenant has no placement yet). The new epoch is `expected + 1`.
    SetPlacement {
        tenant: String,
        expected_epoch: u64,
        home: String,
        standbys: Vec<String>,
    },
    SetRegionStatus {
        region: String,
        status: RegionStatus,
    },
    /// Re-encryption: replace the record's sealed blobs with the same
    /// contents sealed under a newer key. A compare-and-set on the whole
    /// record as the re-encryptor read it (fence, status, `updated_at` and
    /// both blobs): any owner write in between wins, and this answers
    /// `Fenced`. Never changes anything but the blobs.
    Reseal {
        scope: Scope,
        fence: u64,
        updated_at: Millis,
        seen_payload: Option<Sealed>,
        seen_response: Option<Sealed>,
        payload: Option<Sealed>,
        response: Option<Sealed>,
    },
    /// Failover of a whole region in one entry: every tenant whose home is
    /// `from` moves to [`Placement::failover_target`] with `eligible` as the
    /// regions that may take it, its epoch bumped once. A tenant with no
    /// eligible standby stays (answered as stranded). Race-safe like the
    /// per-tenant compare-and-set: a second identical move finds no tenant
    /// homed in `from` and moves nothing
    /// (docs/decisions/0036-bulk-placement-moves.md).
    MoveRegion {
        from: String,
        eligible: Vec<String>,
    },
    /// Failback in one entry: every tenant whose preferred home is `to`,
    /// and which lives elsewhere, goes home ([`Placement::failback_target`]),
    /// its epoch bumped once. A second identical one moves nothing.
    ReturnHome {
        to: String,
    },
    /// Wire version 2. The cluster moves to wire `version` (never back):
    /// commands of that version may be proposed from the next entry on.
    /// Proposed by the leader alone, once every member declares it speaks
    /// it (docs/decisions/0041-wire-versions.md). Moving to 2 starts the
    /// record of when each client was last seen, which
    /// [`Op::ForgetIdleClients`] judges by.
    RaiseWireVersion {
        version: u16,
    },
    /// Wire version 2. Forgets the dedup entries of up to `limit` clients
    /// not seen for `idle_ms` before the leader's stamp: their replies and
    /// their floor. A client's retries of one command last seconds, so a
    /// client idle this long is gone (a process that restarted takes a new
    /// id) and would never send those sequences again. Proposed by the
    /// leader alone.
    ForgetIdleClients {
        idle_ms: i64,
        limit: u32,
    },
    /// Wire version 4. Failover in one entry whose apply costs the same
    /// at any number of tenants: from this entry on, every tenant whose
    /// placement is home in `from` counts as moved to its first standby
    /// that is not `from` and is in `eligible`
    /// ([`Placement::failover_target`]), its epoch bumped once — the same
    /// outcome as [`Op::MoveRegion`], but recorded as one evacuation that
    /// each read of a placement applies, not as a rewrite of every
    /// placement (docs/decisions/0055-evacuations.md). Answered
    /// `Evacuated`.
    EvacuateRegion {
        from: String,
        eligible: Vec<String>,
    },
    /// Wire version 5. In the directory group: from now on `tenant` lives
    /// in `group` (docs/decisions/0063-a-raft-group-per-home-region.md).
    /// Applies only while this group holds nothing of the tenant (no
    /// record, business key or placement) or already assigns it to `group`
    /// (`Assigned`); otherwise `TenantInUse`, and nothing changes. Never
    /// undone: every later claim of the tenant here is answered
    /// `OtherGroup`.
    AssignTenant {
        tenant: String,
        group: String,
    },
    /// Wire version 6. The cluster's regions are `regions` and every region
    /// declared before (a region is never forgotten: placements may name
    /// it). From the first one on, a placement, region status, move or
    /// evacuation naming any other region is answered
    /// [`Reply::UnknownRegion`] and writes nothing
    /// (docs/decisions/0098-regions-validated-on-apply.md). Proposed by the
    /// leader alone, from its members' configured regions.
    DeclareRegions {
        regions: Vec<String>,
    },
}

impl Op {
    /// The wire version that first carried this command: the cluster must
    /// have moved to it before it is proposed.
    pub fn wire_version(&self) -> u16 {
        match self {
            Self::RaiseWireVersion { .. } | Self::ForgetIdleClients { .. } => 2,
            Self::EvacuateRegion { .. } => 4,
            Self::AssignTenant { .. } => 5,
            Self::DeclareRegions { .. } => 6,
            _ => 1,
        }
    }

    /// The regions this command would write into placements, region
    /// statuses or evacuations: each must be one the cluster knows
    /// ([`Op::DeclareRegions`]). Claims and takeovers name the caller's
    /// region, which a placement already decides (`Misdirected`).
    pub fn regions_named(&self) -> Vec<&str> {
        match self {
            Self::SetPlacement { home, standbys, .. } => std::iter::once(home)
                .chain(standbys)
                .map(String::as_str)
                .collect(),
            Self::SetRegionStatus { region, .. } => vec![region.as_str()],
            Self::MoveRegion { from, eligible } | Self::EvacuateRegion { from, eligible } => {
                std::iter::once(from)
                    .chain(eligible)
                    .map(String::as_str)
                    .collect()
            }
            Self::ReturnHome { to } => vec![to.as_str()],
            _ => Vec::new(),
        }
    }
}

/// A client's command: deduplicated at apply by `(client, seq)`, so a
/// command retried after a leader change applies once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest {
    pub client: u64,
    pub seq: u64,
    /// Every seq of this client below this one has its answer: their dedup
    /// entries may be forgotten.
    pub acked_below: u64,
    /// The time apply judges by: whatever the client sends is overwritten
    /// by the leader's clock just before the entry is proposed.
    pub now: Millis,
    pub op: Op,
}

/// One raft entry: many client requests committed together (group commit).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub requests: Vec<ClientRequest>,
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch of {}", self.requests.len())
    }
}

/// The answer to one op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The claim won: this caller owns the record, with its fencing token.
    Claimed(Record),
    /// Someone holds the scoped key: decide from the record.
    Existing(Record),
    /// The business key belongs to another payment; nothing was written.
    BusinessKeyTaken {
        payment_id: Option<String>,
        scope: Scope,
    },
    /// The claiming region is not the tenant's home at the stated epoch.
    Misdirected {
        placement: Placement,
    },
    /// A fenced write or takeover that applied; the record as it now is.
    Updated(Record),
    /// The fence did not match, or the record is no longer in a state that
    /// allows this write: the caller must stop (I6).
    Fenced {
        current: Option<Record>,
    },
    /// Takeover refused: the lease is still valid at the stamped time.
    LeaseValid {
        locked_until: Millis,
    },
    NotFound,
    /// Expire/purge: how many records.
    Count(u64),
    Placement(Placement),
    /// Placement CAS lost: the current placement.
    PlacementConflict {
        current: Option<Placement>,
    },
    Ok,
    /// This `(client, seq)` was acknowledged and forgotten long ago; a
    /// client never sends it again, so seeing it is a client bug.
    StaleSequence,
    /// A bulk move ([`Op::MoveRegion`], [`Op::ReturnHome`]): every tenant it
    /// moved with its new placement, and the tenants homed in the failed
    /// region that no eligible standby could take.
    Moved {
        moved: Vec<MovedPlacement>,
        stranded: Vec<String>,
    },
    /// An evacuation ([`Op::EvacuateRegion`]) applied: it is the cluster's
    /// `number`th (they are numbered in log order, from 1). `again`: it
    /// repeated the last one (same region, no region it allows that the
    /// last did not, no placement written since), so it moved no one and
    /// was not recorded — another router's evacuation of the same region
    /// won.
    Evacuated {
        number: u64,
        again: bool,
    },
    /// Not proposed: the command is of a wire version the cluster has not
    /// moved to yet (`cluster`, as the member that answered has applied
    /// it). Nothing was written.
    NotAgreed {
        needs: u16,
        cluster: u16,
    },
    /// [`Op::AssignTenant`] applied: the tenant lives in `group` (now, or
    /// since an earlier assignment to the same group).
    Assigned {
        group: String,
    },
    /// [`Op::AssignTenant`] refused: this group already holds some of the
    /// tenant's state, or assigns it to another group (`assigned`).
    /// Nothing was written.
    TenantInUse {
        assigned: Option<String>,
    },
    /// The tenant lives in `group`, not in the group that answered: a
    /// claim or placement sent here was refused and wrote nothing. Send it
    /// to `group` (docs/decisions/0063-a-raft-group-per-home-region.md).
    OtherGroup {
        group: String,
    },
    /// The command names `region`, which is not one of the cluster's
    /// ([`Op::DeclareRegions`]): nothing was written. A stable refusal:
    /// sending it again gets the same answer.
    UnknownRegion {
        region: String,
    },
}

/// One tenant a bulk move moved: where it was, and its placement now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedPlacement {
    pub tenant: String,
    pub from: String,
    pub placement: Placement,
}

/// The replies of one batch, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply {
    pub replies: Vec<Reply>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the `sql` mode stores and the operator API shows: a rename
    /// here would strand every stored row.
    #[test]
    fn names_are_the_canonical_ones_and_parse_back() {
        let statuses: Vec<_> = Status::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            statuses,
            [
                "IN_PROGRESS",
                "COMPLETED",
                "FAILED_REPLAYABLE",
                "FAILED_RETRYABLE",
                "UNKNOWN_REQUIRES_RECOVERY",
                "EXPIRED",
            ]
        );
        let steps: Vec<_> = Step::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            steps,
            [
                "RECEIVED",
                "LOCAL_PAYMENT_CREATED",
                "PROVIDER_REQUEST_SENT",
                "PROVIDER_CONFIRMED",
                "COMPLETED",
            ]
        );
        for &status in Status::ALL {
            assert_eq!(status.to_string().parse::<Status>(), Ok(status));
        }
        for &step in Step::ALL {
            assert_eq!(step.to_string().parse::<Step>(), Ok(step));
        }
        assert_eq!(
            "InProgress".parse::<Status>(),
            Err("unknown Status \"InProgress\"".to_owned())
        );
        assert!("completed".parse::<Step>().is_err());
    }

    /// The serde form is what the Raft log, snapshots and the client wire
    /// carry (postcard) and what JSON shows: the variant's identifier, never
    /// the canonical name, and postcard's variant index in declaration order.
    /// A command of a newer wire version comes after every older one, so
    /// a member of the build before fails to decode it (an unknown variant
    /// index) rather than read it as some other command.
    #[test]
    fn commands_of_a_newer_wire_version_come_last() {
        let raise = Op::RaiseWireVersion { version: 2 };
        let forget = Op::ForgetIdleClients {
            idle_ms: 1,
            limit: 1,
        };
        // ReturnHome, the last command of version 1, is variant 13.
        let last_of_v1 = Op::ReturnHome { to: "eu".into() };
        assert_eq!(postcard::to_allocvec(&last_of_v1).unwrap()[0], 13);
        assert_eq!(last_of_v1.wire_version(), 1);
        assert_eq!(postcard::to_allocvec(&raise).unwrap(), [14, 2]);
        assert_eq!(postcard::to_allocvec(&forget).unwrap(), [15, 2, 1]);
        for op in [raise, forget] {
            assert_eq!(op.wire_version(), 2);
            assert!(op.wire_version() <= crate::wire::WIRE_VERSION);
        }
        let evacuate = Op::EvacuateRegion {
            from: "eu".into(),
            eligible: vec![],
        };
        assert_eq!(
            postcard::to_allocvec(&evacuate).unwrap(),
            [16, 2, b'e', b'u', 0]
        );
        assert_eq!(evacuate.wire_version(), 4);
        assert!(evacuate.wire_version() <= crate::wire::WIRE_VERSION);
        // Its replies come after every older one too.
        assert_eq!(
            postcard::to_allocvec(&Reply::Evacuated {
                number: 1,
                again: false
            })
            .unwrap(),
            [14, 1, 0]
        );
        assert_eq!(
            postcard::to_allocvec(&Reply::NotAgreed {
                needs: 4,
                cluster: 3
            })
            .unwrap(),
            [15, 4, 3]
        );
        let assign = Op::AssignTenant {
            tenant: "t".into(),
            group: "g".into(),
        };
        assert_eq!(
            postcard::to_allocvec(&assign).unwrap(),
            [17, 1, b't', 1, b'g']
        );
        assert_eq!(assign.wire_version(), 5);
        assert!(assign.wire_version() <= crate::wire::WIRE_VERSION);
        for (reply, index) in [
            (Reply::Assigned { group: "g".into() }, 16),
            (Reply::TenantInUse { assigned: None }, 17),
            (Reply::OtherGroup { group: "g".into() }, 18),
            (Reply::UnknownRegion { region: "r".into() }, 19),
        ] {
            assert_eq!(postcard::to_allocvec(&reply).unwrap()[0], index);
        }
        let declare = Op::DeclareRegions {
            regions: vec!["eu".into()],
        };
        assert_eq!(
            postcard::to_allocvec(&declare).unwrap(),
            [18, 1, 2, b'e', b'u']
        );
        assert_eq!(declare.wire_version(), 6);
        assert!(declare.wire_version() <= crate::wire::WIRE_VERSION);
    }

    #[test]
    fn the_serde_form_is_pinned() {
        fn json<T: Serialize>(value: &T) -> String {
            serde_json::to_string(value).unwrap()
        }
        let statuses = [
            (Status::InProgress, r#""InProgress""#, 0),
            (Status::Completed, r#""Completed""#, 1),
            (Status::FailedReplayable, r#""FailedReplayable""#, 2),
            (Status::FailedRetryable, r#""FailedRetryable""#, 3),
            (
                Status::UnknownRequiresRecovery,
                r#""UnknownRequiresRecovery""#,
                4,
            ),
            (Status::Expired, r#""Expired""#, 5),
        ];
        for (status, form, index) in statuses {
            assert_eq!(json(&status), form);
            assert_eq!(postcard::to_allocvec(&status).unwrap(), [index]);
        }
        let steps = [
            (Step::Received, r#""Received""#, 0),
            (Step::LocalPaymentCreated, r#""LocalPaymentCreated""#, 1),
            (Step::ProviderRequestSent, r#""ProviderRequestSent""#, 2),
            (Step::ProviderConfirmed, r#""ProviderConfirmed""#, 3),
            (Step::Completed, r#""Completed""#, 4),
        ];
        for (step, form, index) in steps {
            assert_eq!(json(&step), form);
            assert_eq!(postcard::to_allocvec(&step).unwrap(), [index]);
        }
        let response = StoredResponse {
            status: 201,
            headers: vec![("Location".into(), "/p/1".into())],
            body: b"{}".to_vec(),
            schema_version: 1,
        };
        assert_eq!(
            json(&response),
            r#"{"status":201,"headers":[["Location","/p/1"]],"body":[123,125],"schema_version":1}"#
        );
        assert_eq!(
            postcard::to_allocvec(&response).unwrap(),
            [
                0xc9, 0x01, // status 201 (varint)
                1,    // one header
                8, b'L', b'o', b'c', b'a', b't', b'i', b'o', b'n', //
                4, b'/', b'p', b'/', b'1', //
                2, b'{', b'}', // body
                2,    // schema_version 1 (zigzag)
            ]
        );
        // A sealed blob is plain bytes on the log and the wire.
        let sealed = Sealed(vec![1, 2, 3]);
        assert_eq!(json(&sealed), "[1,2,3]");
        assert_eq!(postcard::to_allocvec(&sealed).unwrap(), [3, 1, 2, 3]);
        let reseal = Op::Reseal {
            scope: Scope {
                tenant: "t".into(),
                principal: "p".into(),
                operation: "o".into(),
                key: "k".into(),
            },
            fence: 1,
            updated_at: 2,
            seen_payload: None,
            seen_response: Some(Sealed(vec![9])),
            payload: None,
            response: Some(Sealed(vec![8])),
        };
        assert_eq!(
            postcard::to_allocvec(&reseal).unwrap(),
            [
                11, // Op::Reseal, the last variant
                1, b't', 1, b'p', 1, b'o', 1, b'k', // scope
                1,    // fence
                4,    // updated_at 2 (zigzag)
                0,    // no payload seen
                1, 1, 9, // the response seen
                0, // no payload
                1, 1, 8, // the new response
            ]
        );
    }

    fn placement(home: &str, standbys: &[&str], preferred: &str) -> Placement {
        Placement {
            home: home.into(),
            standbys: standbys.iter().map(|s| s.to_string()).collect(),
            epoch: 3,
            preferred_home: preferred.into(),
        }
    }

    #[test]
    fn failover_picks_the_first_eligible_standby_and_puts_the_failed_region_last() {
        let p = placement("eu", &["us", "ap"], "eu");
        assert_eq!(
            p.failover_target("eu", |_| true),
            Some(("us".into(), vec!["ap".into(), "eu".into()]))
        );
        assert_eq!(
            p.failover_target("eu", |r| r != "us"),
            Some(("ap".into(), vec!["us".into(), "eu".into()]))
        );
        assert_eq!(p.failover_target("eu", |_| false), None);
    }

    #[test]
    fn failback_restores_the_original_order() {
        let original = placement("eu", &["us", "ap"], "eu");
        let (home, standbys) = original.failover_target("eu", |_| true).unwrap();
        let failed_over = Placement {
            home,
            standbys,
            ..original.clone()
        };
        let (home, standbys) = failed_over.failback_target();
        assert_eq!(home, original.home);
        assert_eq!(standbys, original.standbys);
    }

    /// The bulk moves are new variants at the end: every older entry in a
    /// log or snapshot keeps its index.
    #[test]
    fn the_bulk_moves_come_last() {
        let moved = Op::MoveRegion {
            from: "eu".into(),
            eligible: vec!["us".into()],
        };
        assert_eq!(
            postcard::to_allocvec(&moved).unwrap(),
            [12, 2, b'e', b'u', 1, 2, b'u', b's']
        );
        let home = Op::ReturnHome { to: "eu".into() };
        assert_eq!(postcard::to_allocvec(&home).unwrap(), [13, 2, b'e', b'u']);
        let reply = Reply::Moved {
            moved: vec![],
            stranded: vec![],
        };
        assert_eq!(postcard::to_allocvec(&reply).unwrap(), [13, 0, 0]);
    }

    /// The boundary both sides judge by: a lease or a window is over at the
    /// moment it names; unfinished records never expire.
    #[test]
    fn a_lease_and_a_window_are_over_at_the_moment_they_name() {
        assert!(!lease_expired(10, 9));
        assert!(lease_expired(10, 10));
        assert!(!is_expired(Status::Completed, Some(10), 9));
        assert!(is_expired(Status::Completed, Some(10), 10));
        assert!(is_expired(Status::FailedRetryable, Some(10), 10));
        assert!(!is_expired(Status::Completed, None, i64::MAX));
        assert!(!is_expired(Status::InProgress, Some(10), 11));
        assert!(!is_expired(Status::UnknownRequiresRecovery, Some(10), 11));
        assert!(is_expired(Status::Expired, None, 0));
    }
}
