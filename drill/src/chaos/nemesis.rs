//! The nemeses a chaos run draws its faults from, and the faults as drawn:
//! what is done to which process or link, and for how long. Drawing is a
//! pure function of the seed and the regions, so a seed repeats a
//! schedule; choices that depend on the cluster's state at the time (which
//! member leads) are drawn as a number and resolved when the fault is
//! applied.
//!
//! The schedule goes through the chosen nemeses in a shuffled round, then
//! another, so every nemesis comes up once in each round, in an order the
//! seed decides.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A kind of fault.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Nemesis {
    /// SIGKILL a node, a store member, the store leader or a whole region;
    /// then start what died again.
    Kill,
    /// SIGSTOP a node or a store member for longer than the lease, then
    /// SIGCONT: the owner wakes and tries to finish.
    Pause,
    /// Cut links between regions: one region from the others, a bridge, or
    /// one way only; healed all at once or halfway first.
    Partition,
    /// Restart a node or a store member with its wall clock minutes to hours
    /// off (libfaketime), and later with the true time again.
    Skew,
    /// A rolling restart of every process, one at a time, as a Kubernetes
    /// rollout does: SIGTERM, drain, start, ready.
    Restart,
    /// Remove a store member, wipe it, add it back under load (it catches up
    /// from a snapshot).
    Membership,
    /// Start an election on a follower and SIGKILL it in the middle of it.
    Leader,
}

impl Nemesis {
    pub const ALL: [Nemesis; 7] = [
        Nemesis::Kill,
        Nemesis::Pause,
        Nemesis::Partition,
        Nemesis::Skew,
        Nemesis::Restart,
        Nemesis::Membership,
        Nemesis::Leader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Nemesis::Kill => "kill",
            Nemesis::Pause => "pause",
            Nemesis::Partition => "partition",
            Nemesis::Skew => "skew",
            Nemesis::Restart => "restart",
            Nemesis::Membership => "membership",
            Nemesis::Leader => "leader",
        }
    }
}

/// Which process of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Node,
    Store,
}

/// One process of one region, named as `once up` names it
/// (`node-<region>`, `store-<region>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    pub role: Role,
    pub region: String,
}

impl ProcessRef {
    pub fn name(&self) -> String {
        match self.role {
            Role::Node => format!("node-{}", self.region),
            Role::Store => format!("store-{}", self.region),
        }
    }
}

/// What a kill fault kills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum KillTarget {
    Process {
        process: ProcessRef,
    },
    /// Whichever member leads when the fault is applied.
    StoreLeader,
    /// The region's node and store member at once.
    Region {
        region: String,
    },
}

/// Which links a partition cuts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum PartitionShape {
    /// `region` (a minority) cut off from every other region (the
    /// majority), store and router alike.
    Isolate { region: String },
    /// `a` and `b` cannot reach each other; `bridge` reaches both.
    Bridge {
        a: String,
        b: String,
        bridge: String,
    },
    /// `refusing`'s store member refuses whatever `from` sends it, while its
    /// own traffic to `from` still flows.
    OneWay { refusing: String, from: String },
}

/// How a partition heals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Healing {
    Whole,
    /// Some of the cut links heal first; the rest `after_ms` later.
    Halfway {
        after_ms: u64,
    },
}

/// A fault as drawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "nemesis", rename_all = "snake_case")]
pub enum Fault {
    Kill {
        target: KillTarget,
    },
    Pause {
        process: ProcessRef,
    },
    Partition {
        shape: PartitionShape,
        healing: Healing,
    },
    Skew {
        process: ProcessRef,
        offset_seconds: i64,
    },
    Restart,
    Membership {
        /// Picks one of the followers at the time (modulo their number).
        pick: u32,
    },
    Leader {
        /// Picks one of the followers at the time (modulo their number).
        pick: u32,
        /// How long after asking for the election the candidate is killed.
        kill_after_ms: u64,
    },
}

impl Fault {
    pub fn nemesis(&self) -> Nemesis {
        match self {
            Fault::Kill { .. } => Nemesis::Kill,
            Fault::Pause { .. } => Nemesis::Pause,
            Fault::Partition { .. } => Nemesis::Partition,
            Fault::Skew { .. } => Nemesis::Skew,
            Fault::Restart => Nemesis::Restart,
            Fault::Membership { .. } => Nemesis::Membership,
            Fault::Leader { .. } => Nemesis::Leader,
        }
    }

    /// The fault in a few words, for the timeline.
    pub fn describe(&self) -> String {
        match self {
            Fault::Kill { target } => match target {
                KillTarget::Process { process } => format!("SIGKILL {}", process.name()),
                KillTarget::StoreLeader => "SIGKILL the store leader".to_owned(),
                KillTarget::Region { region } => {
                    format!("SIGKILL region {region} (node and store)")
                }
            },
            Fault::Pause { process } => format!("SIGSTOP {} past the lease", process.name()),
            Fault::Partition { shape, healing } => {
                let healing = match healing {
                    Healing::Whole => "healed whole".to_owned(),
                    Healing::Halfway { after_ms } => {
                        format!("healed halfway, the rest {after_ms} ms later")
                    }
                };
                let shape = match shape {
                    PartitionShape::Isolate { region } => {
                        format!("region {region} cut off from the others")
                    }
                    PartitionShape::Bridge { a, b, bridge } => {
                        format!("{a} and {b} cut from each other, {bridge} bridging")
                    }
                    PartitionShape::OneWay { refusing, from } => {
                        format!("one way: {refusing} refuses {from}, {refusing} → {from} flows")
                    }
                };
                format!("partition: {shape}; {healing}")
            }
            Fault::Skew {
                process,
                offset_seconds,
            } => format!(
                "{} restarted with its clock {offset_seconds:+} s off",
                process.name()
            ),
            Fault::Restart => "rolling restart of every process".to_owned(),
            Fault::Membership { .. } => "a store follower removed, wiped and added back".to_owned(),
            Fault::Leader { kill_after_ms, .. } => {
                format!("election on a follower, SIGKILLed {kill_after_ms} ms after")
            }
        }
    }
}

/// One step of the schedule: a quiet spell, then the fault, held for a
/// while before it heals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub quiet_ms: u64,
    pub fault: Fault,
    pub hold_ms: u64,
}

/// The seeded source of the run's steps.
#[derive(Debug)]
pub struct Schedule {
    rng: StdRng,
    nemeses: Vec<Nemesis>,
    regions: Vec<String>,
    lease: Duration,
    round: Vec<Nemesis>,
}

impl Schedule {
    /// `regions` are the cluster's (at least three: every fault leaves a
    /// store majority); `lease` is the nodes' lease, which pauses outlast.
    pub fn new(seed: u64, nemeses: &[Nemesis], regions: &[String], lease: Duration) -> Self {
        let mut nemeses = nemeses.to_vec();
        nemeses.sort();
        nemeses.dedup();
        Self {
            rng: StdRng::seed_from_u64(seed),
            nemeses,
            regions: regions.to_vec(),
            lease,
            round: Vec::new(),
        }
    }

    /// How many steps make one round (every chosen nemesis once).
    pub fn round_len(&self) -> usize {
        self.nemeses.len()
    }

    fn region(&mut self) -> String {
        self.regions[self.rng.random_range(0..self.regions.len())].clone()
    }

    /// Two or three distinct regions, in a random order.
    fn distinct(&mut self, n: usize) -> Vec<String> {
        let mut regions = self.regions.clone();
        regions.shuffle(&mut self.rng);
        regions.truncate(n);
        regions
    }

    fn process(&mut self) -> ProcessRef {
        let role = if self.rng.random_bool(0.5) {
            Role::Node
        } else {
            Role::Store
        };
        ProcessRef {
            role,
            region: self.region(),
        }
    }

    fn fault(&mut self, nemesis: Nemesis) -> Fault {
        match nemesis {
            Nemesis::Kill => {
                let target = match self.rng.random_range(0..4) {
                    0 => KillTarget::StoreLeader,
                    1 => KillTarget::Region {
                        region: self.region(),
                    },
                    _ => KillTarget::Process {
                        process: self.process(),
                    },
                };
                Fault::Kill { target }
            }
            Nemesis::Pause => Fault::Pause {
                process: self.process(),
            },
            Nemesis::Partition => {
                let shape = match self.rng.random_range(0..3) {
                    0 => PartitionShape::Isolate {
                        region: self.region(),
                    },
                    1 => {
                        let r = self.distinct(3);
                        PartitionShape::Bridge {
                            a: r[0].clone(),
                            b: r[1].clone(),
                            bridge: r[2].clone(),
                        }
                    }
                    _ => {
                        let r = self.distinct(2);
                        PartitionShape::OneWay {
                            refusing: r[0].clone(),
                            from: r[1].clone(),
                        }
                    }
                };
                let healing = if self.rng.random_bool(0.5) {
                    Healing::Whole
                } else {
                    Healing::Halfway {
                        after_ms: self.rng.random_range(1_000..4_000),
                    }
                };
                Fault::Partition { shape, healing }
            }
            Nemesis::Skew => {
                // Minutes to hours, either way; never a whole replay window
                // (24 h), which no clock is trusted to be off by.
                let magnitude = self.rng.random_range(120..=3 * 3600);
                let sign = if self.rng.random_bool(0.5) { 1 } else { -1 };
                Fault::Skew {
                    process: self.process(),
                    offset_seconds: sign * magnitude,
                }
            }
            Nemesis::Restart => Fault::Restart,
            Nemesis::Membership => Fault::Membership {
                pick: self.rng.random(),
            },
            Nemesis::Leader => Fault::Leader {
                pick: self.rng.random(),
                kill_after_ms: self.rng.random_range(0..300),
            },
        }
    }

    fn hold_ms(&mut self, nemesis: Nemesis) -> u64 {
        let lease = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        match nemesis {
            // Past the lease, so another owner may take over meanwhile.
            Nemesis::Pause => lease + self.rng.random_range(1_000..3_000),
            // Done as a whole when applied.
            Nemesis::Restart | Nemesis::Membership => 0,
            _ => self.rng.random_range(2_000..6_000),
        }
    }
}

impl Iterator for Schedule {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        if self.nemeses.is_empty() || self.regions.is_empty() {
            return None;
        }
        if self.round.is_empty() {
            self.round = self.nemeses.clone();
            self.round.shuffle(&mut self.rng);
        }
        let nemesis = self.round.remove(0);
        let quiet_ms = self.rng.random_range(1_000..3_000);
        let fault = self.fault(nemesis);
        let hold_ms = self.hold_ms(nemesis);
        Some(Step {
            quiet_ms,
            fault,
            hold_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions() -> Vec<String> {
        ["eu-west", "us-east", "ap-south"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn a_seed_repeats_its_schedule_and_another_seed_does_not() {
        let steps = |seed| {
            Schedule::new(seed, &Nemesis::ALL, &regions(), Duration::from_secs(10))
                .take(30)
                .collect::<Vec<_>>()
        };
        assert_eq!(steps(7), steps(7));
        assert_ne!(steps(7), steps(8));
    }

    #[test]
    fn every_round_brings_every_chosen_nemesis_once() {
        let chosen = [Nemesis::Pause, Nemesis::Kill, Nemesis::Skew];
        let schedule = Schedule::new(3, &chosen, &regions(), Duration::from_secs(10));
        let kinds: Vec<Nemesis> = schedule.take(9).map(|s| s.fault.nemesis()).collect();
        for round in kinds.chunks(3) {
            let mut round = round.to_vec();
            round.sort();
            assert_eq!(round, [Nemesis::Kill, Nemesis::Pause, Nemesis::Skew]);
        }
    }

    #[test]
    fn pauses_outlast_the_lease_and_skews_stay_within_hours() {
        let lease = Duration::from_secs(10);
        for step in Schedule::new(11, &Nemesis::ALL, &regions(), lease).take(200) {
            match step.fault {
                Fault::Pause { .. } => assert!(step.hold_ms > 10_000, "{step:?}"),
                Fault::Skew { offset_seconds, .. } => {
                    assert!((120..=3 * 3600).contains(&offset_seconds.abs()), "{step:?}");
                }
                Fault::Partition {
                    shape: PartitionShape::Bridge { a, b, bridge },
                    ..
                } => {
                    assert!(a != b && b != bridge && a != bridge);
                }
                Fault::Partition {
                    shape: PartitionShape::OneWay { refusing, from },
                    ..
                } => assert_ne!(refusing, from),
                _ => {}
            }
        }
    }

    #[test]
    fn nothing_to_draw_from_is_an_empty_schedule() {
        assert!(
            Schedule::new(1, &[], &regions(), Duration::from_secs(10))
                .next()
                .is_none()
        );
    }
}
