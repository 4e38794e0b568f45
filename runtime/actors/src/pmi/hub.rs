//! A PMI job's fences gathered at its leader, the *hub*: each other member's agent
//! sends its keys there over a data connection, and every member hears all of them
//! back once all are in. The root takes no part (it gathers only for jobs whose
//! leader serves no data connections): one hop each way between agents, and nothing
//! to send again when a standby root takes over. Pure: the desk keeps one
//! [`Gathering`] per job it leads and who waits on it; the root keeps one per job
//! whose leader serves no data connections.

use saker_wire::messages::PmiFence;

/// One job's fence being gathered at its leader.
#[derive(Debug)]
pub struct Gathering {
    /// Which of the job's fences gathers now, from 0.
    epoch: u32,
    /// Each member's keys of this fence, once in.
    puts: Vec<Option<Vec<(String, String)>>>,
    /// The fence gathered last, for a member that did not hear it (its stream
    /// broke) and sends its keys again.
    last: Option<PmiFence>,
}

/// What a member's keys made of the fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gathered {
    /// Others are still to come.
    Waiting,
    /// The last were in: every member's keys, in member order (as the root sends
    /// them). The next fence begins.
    All(PmiFence),
    /// The member sent again its keys of the fence gathered last: its answer.
    Again(PmiFence),
}

/// A member's fence that does not fit its job's: the job is ended with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    #[error("a PMI fence from member {member}, which a gang of {members} does not have")]
    NoMember { member: u32, members: usize },
    #[error("member {member} sent fence {sent} while fence {gathering} gathers")]
    OtherEpoch {
        member: u32,
        sent: u32,
        gathering: u32,
    },
    #[error("member {member} sent other keys for fence {epoch} than before")]
    Changed { member: u32, epoch: u32 },
}

impl Gathering {
    /// The gathering of a job of `members` members, at its first fence.
    pub fn new(members: u32) -> Gathering {
        Gathering::at(members, 0)
    }

    /// The gathering of a job of `members` members, at fence `epoch` (a root that
    /// adopted a running job learns it from the first member that resends its keys).
    pub fn at(members: u32, epoch: u32) -> Gathering {
        Gathering {
            epoch,
            puts: vec![None; members as usize],
            last: None,
        }
    }

    /// Takes one member's keys. The same keys sent again (a member whose stream
    /// broke) are taken as once, for the fence gathering and for the one before.
    pub fn add(&mut self, fence: PmiFence) -> Result<Gathered, HubError> {
        let members = self.puts.len();
        let member = fence.member;
        if let Some(last) = &self.last
            && fence.epoch == last.epoch
            && (member as usize) < members
        {
            return Ok(Gathered::Again(last.clone()));
        }
        let Some(slot) = self.puts.get_mut(member as usize) else {
            return Err(HubError::NoMember { member, members });
        };
        if fence.epoch != self.epoch {
            return Err(HubError::OtherEpoch {
                member,
                sent: fence.epoch,
                gathering: self.epoch,
            });
        }
        match slot {
            Some(puts) if *puts == fence.puts => return Ok(Gathered::Waiting),
            Some(_) => {
                return Err(HubError::Changed {
                    member,
                    epoch: fence.epoch,
                });
            }
            None => *slot = Some(fence.puts),
        }
        if self.puts.iter().any(Option::is_none) {
            return Ok(Gathered::Waiting);
        }
        let all = std::mem::replace(&mut self.puts, vec![None; members]);
        let all = PmiFence {
            attempt: fence.attempt,
            member: 0,
            epoch: self.epoch,
            puts: all.into_iter().flatten().flatten().collect(),
        };
        self.epoch += 1;
        self.last = Some(all.clone());
        Ok(Gathered::All(all))
    }
}

#[cfg(test)]
mod tests {
    use saker_wire::messages::{AttemptId, PmiFence};

    use super::{Gathered, Gathering, HubError};

    fn fence(member: u32, epoch: u32, key: &str) -> PmiFence {
        PmiFence {
            attempt: AttemptId(9),
            member,
            epoch,
            puts: vec![(key.to_owned(), format!("v{member}"))],
        }
    }

    fn all(gathered: Result<Gathered, HubError>) -> PmiFence {
        match gathered {
            Ok(Gathered::All(all)) => all,
            other => panic!("expected every member's keys, got {other:?}"),
        }
    }

    #[test]
    fn a_fence_ends_once_every_member_is_in_with_all_keys_in_member_order() {
        let mut hub = Gathering::new(3);
        assert_eq!(hub.add(fence(2, 0, "c")), Ok(Gathered::Waiting));
        assert_eq!(hub.add(fence(0, 0, "a")), Ok(Gathered::Waiting));
        let first = all(hub.add(fence(1, 0, "b")));
        assert_eq!((first.attempt, first.epoch), (AttemptId(9), 0));
        let keys: Vec<&str> = first.puts.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        // The next fence starts empty.
        assert_eq!(hub.add(fence(1, 1, "d")), Ok(Gathered::Waiting));
        assert_eq!(hub.add(fence(0, 1, "e")), Ok(Gathered::Waiting));
        let next = all(hub.add(fence(2, 1, "f")));
        assert_eq!(next.epoch, 1);
        assert_eq!(next.puts.len(), 3);
    }

    #[test]
    fn keys_sent_again_after_a_broken_stream_count_once_and_are_answered() {
        let mut hub = Gathering::new(2);
        assert_eq!(hub.add(fence(1, 0, "b")), Ok(Gathered::Waiting));
        // Member 1's stream broke while it waited: the same keys again.
        assert_eq!(hub.add(fence(1, 0, "b")), Ok(Gathered::Waiting));
        let first = all(hub.add(fence(0, 0, "a")));
        assert_eq!(first.puts.len(), 2);
        // Its stream broke before the answer: it hears the fence gathered last.
        assert_eq!(hub.add(fence(1, 0, "b")), Ok(Gathered::Again(first)));
    }

    #[test]
    fn a_fence_that_does_not_fit_is_refused_by_what_is_wrong() {
        let mut hub = Gathering::new(2);
        assert_eq!(
            hub.add(fence(2, 0, "x")),
            Err(HubError::NoMember {
                member: 2,
                members: 2
            })
        );
        assert_eq!(
            hub.add(fence(1, 1, "x")),
            Err(HubError::OtherEpoch {
                member: 1,
                sent: 1,
                gathering: 0
            })
        );
        assert_eq!(hub.add(fence(1, 0, "x")), Ok(Gathered::Waiting));
        assert_eq!(
            hub.add(fence(1, 0, "y")),
            Err(HubError::Changed {
                member: 1,
                epoch: 0
            })
        );
    }
}
