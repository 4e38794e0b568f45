//! Dependencies between the jobs of a submission: `name`, `after` and `after_any`.
//!
//! A job names the jobs it waits for by id (any job submitted before) or by the name
//! of a job in the same submission, which may come later in it. [`plan`] turns a
//! submission into the order the core accepts it in, each job's dependencies as ids
//! in that order, refusing unknown names and ids and cycles (with the cycle's path).
//! The order is the submission's own wherever the dependencies allow: of the jobs
//! ready to go, the earliest in the submission goes first. What is journaled is the
//! submitted order with ids, so a resume needs no names.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use saker_core::{Dependency, DependencyKind, JobId};
use serde::{Deserialize, Serialize};

use super::{JobRequest, SpecError, TaskSpec};

/// Longest job name.
const MAX_NAME: usize = 128;

/// A job another waits for: its id, or its name in the same submission.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JobRef {
    Id(u32),
    Name(String),
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "job {id}"),
            JobRef::Name(name) => write!(f, "{name:?}"),
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && !name.chars().any(char::is_control)
}

pub(super) fn validate(spec: &TaskSpec) -> Result<(), SpecError> {
    if let Some(name) = &spec.name
        && !valid_name(name)
    {
        return Err(SpecError::InvalidJobName { name: name.clone() });
    }
    for reference in spec.after.iter().chain(&spec.after_any) {
        match reference {
            JobRef::Id(0) => return Err(SpecError::DependencyOnJobZero),
            JobRef::Name(name) if !valid_name(name) => {
                return Err(SpecError::InvalidDependencyName { name: name.clone() });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Why a submission's dependencies cannot be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("jobs {first} and {second} of the submission are both named {name:?}")]
    DuplicateName {
        name: String,
        first: usize,
        second: usize,
    },
    #[error(
        "job {position} of the submission waits for {name:?}, which no job of the submission is named"
    )]
    UnknownName { position: usize, name: String },
    #[error("job {position} of the submission waits for job {job}, which does not exist yet")]
    UnknownJob { position: usize, job: u32 },
    #[error("the submission's dependencies form a cycle: {path}")]
    Cycle { path: String },
}

/// The order to submit `requests` in (positions), given that the next job id is
/// `next_job`, and each position's dependencies as ids in that order. The requests'
/// `after` and `after_any` are rewritten to those ids.
pub fn plan(
    requests: &mut [JobRequest],
    next_job: u32,
) -> Result<(Vec<usize>, Vec<Vec<Dependency>>), PlanError> {
    let count = requests.len();
    // The common case, a submission without names or dependencies, costs one pass.
    if requests
        .iter()
        .all(|r| r.spec.name.is_none() && r.spec.after.is_empty() && r.spec.after_any.is_empty())
    {
        return Ok(((0..count).collect(), vec![Vec::new(); count]));
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (position, request) in requests.iter().enumerate() {
        if let Some(name) = &request.spec.name
            && let Some(first) = names.insert(name, position)
        {
            return Err(PlanError::DuplicateName {
                name: name.clone(),
                first,
                second: position,
            });
        }
    }
    // Per position: dependencies on earlier jobs (ids), and on jobs of this
    // submission (positions).
    let mut outside: Vec<Vec<Dependency>> = vec![Vec::new(); count];
    let mut inside: Vec<Vec<(usize, DependencyKind)>> = vec![Vec::new(); count];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); count];
    let mut waits_for = vec![0usize; count];
    for (position, request) in requests.iter().enumerate() {
        let kinds = request
            .spec
            .after
            .iter()
            .map(|r| (r, DependencyKind::Success))
            .chain(
                request
                    .spec
                    .after_any
                    .iter()
                    .map(|r| (r, DependencyKind::Any)),
            );
        for (reference, kind) in kinds {
            match reference {
                JobRef::Id(job) if *job == 0 || *job >= next_job => {
                    return Err(PlanError::UnknownJob {
                        position,
                        job: *job,
                    });
                }
                JobRef::Id(job) => outside[position].push(Dependency {
                    job: JobId(*job),
                    kind,
                }),
                JobRef::Name(name) => {
                    let Some(&other) = names.get(name.as_str()) else {
                        return Err(PlanError::UnknownName {
                            position,
                            name: name.clone(),
                        });
                    };
                    inside[position].push((other, kind));
                    dependents[other].push(position);
                    waits_for[position] += 1;
                }
            }
        }
    }
    // Kahn's algorithm, earliest position first among the ready.
    let mut ready: BinaryHeap<Reverse<usize>> = (0..count)
        .filter(|&position| waits_for[position] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(count);
    let mut ids = vec![0u32; count];
    while let Some(Reverse(position)) = ready.pop() {
        ids[position] = next_job + order.len() as u32;
        order.push(position);
        for &dependent in &dependents[position] {
            waits_for[dependent] -= 1;
            if waits_for[dependent] == 0 {
                ready.push(Reverse(dependent));
            }
        }
    }
    if order.len() < count {
        return Err(PlanError::Cycle {
            path: cycle_path(requests, &inside, &waits_for),
        });
    }
    let mut resolved = outside;
    for (position, edges) in inside.into_iter().enumerate() {
        for (other, kind) in edges {
            resolved[position].push(Dependency {
                job: JobId(ids[other]),
                kind,
            });
        }
    }
    for (position, request) in requests.iter_mut().enumerate() {
        let ids_of = |kind| {
            resolved[position]
                .iter()
                .filter(|d| d.kind == kind)
                .map(|d| JobRef::Id(d.job.0))
                .collect()
        };
        request.spec.after = ids_of(DependencyKind::Success);
        request.spec.after_any = ids_of(DependencyKind::Any);
    }
    Ok((order, resolved))
}

/// A cycle among the positions still waiting, as `a → b → … → a` (names where given).
fn cycle_path(
    requests: &[JobRequest],
    inside: &[Vec<(usize, DependencyKind)>],
    waits_for: &[usize],
) -> String {
    let label = |position: usize| match &requests[position].spec.name {
        Some(name) => format!("{name:?}"),
        None => format!("job {position} of the submission"),
    };
    // Walk from a waiting job to a waiting dependency until a job repeats: every
    // waiting job waits for some other waiting job, so the walk must close.
    let start = (0..waits_for.len())
        .find(|&p| waits_for[p] > 0)
        .unwrap_or(0);
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut walk = Vec::new();
    let mut at = start;
    while !seen.contains_key(&at) {
        seen.insert(at, walk.len());
        walk.push(at);
        match inside[at].iter().find(|(other, _)| waits_for[*other] > 0) {
            Some(&(other, _)) => at = other,
            None => break,
        }
    }
    let from = seen.get(&at).copied().unwrap_or(0);
    // The walk follows "waits for"; a path reads in running order, so reverse it.
    let mut cycle: Vec<String> = walk[from..].iter().rev().map(|&p| label(p)).collect();
    if let Some(first) = cycle.first().cloned() {
        cycle.push(first);
    }
    cycle.join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TaskSpec;

    fn job(name: &str, after: &[&str], after_any: &[&str]) -> JobRequest {
        let mut spec = TaskSpec::new(vec!["true".into()]);
        spec.name = (!name.is_empty()).then(|| name.to_owned());
        let refs = |list: &[&str]| {
            list.iter()
                .map(|r| match r.parse::<u32>() {
                    Ok(id) => JobRef::Id(id),
                    Err(_) => JobRef::Name((*r).to_owned()),
                })
                .collect()
        };
        spec.after = refs(after);
        spec.after_any = refs(after_any);
        JobRequest::single(spec)
    }

    #[test]
    fn a_submission_is_ordered_so_every_job_comes_after_what_it_waits_for() {
        let mut requests = vec![
            job("d", &["b", "c"], &[]),
            job("b", &["a"], &[]),
            job("c", &["a"], &["3"]),
            job("a", &[], &[]),
            job("", &[], &[]),
        ];
        let (order, deps) = plan(&mut requests, 10).unwrap();
        // a first (the only ready one of the named), then the unnamed job 4 … in
        // submission order among the ready.
        assert_eq!(order, vec![3, 1, 2, 0, 4]);
        let id = |position: usize| 10 + order.iter().position(|&p| p == position).unwrap() as u32;
        assert_eq!(
            deps[0],
            vec![
                Dependency {
                    job: JobId(id(1)),
                    kind: DependencyKind::Success
                },
                Dependency {
                    job: JobId(id(2)),
                    kind: DependencyKind::Success
                },
            ]
        );
        assert!(deps[2].contains(&Dependency {
            job: JobId(3),
            kind: DependencyKind::Any
        }));
        // Rewritten to ids for the journal.
        assert_eq!(
            requests[0].spec.after,
            vec![JobRef::Id(id(1)), JobRef::Id(id(2))]
        );
        assert_eq!(requests[2].spec.after_any, vec![JobRef::Id(3)]);
    }

    #[test]
    fn cycles_unknown_names_and_ids_and_duplicate_names_are_refused() {
        let mut cycle = vec![
            job("x", &[], &[]),
            job("a", &["c"], &[]),
            job("b", &["a"], &[]),
            job("c", &["b"], &[]),
        ];
        let error = plan(&mut cycle, 1).unwrap_err();
        let PlanError::Cycle { path } = &error else {
            panic!("{error}");
        };
        assert!(
            [
                "\"a\" → \"b\" → \"c\" → \"a\"",
                "\"b\" → \"c\" → \"a\" → \"b\"",
                "\"c\" → \"a\" → \"b\" → \"c\""
            ]
            .contains(&path.as_str()),
            "{path}"
        );
        let mut own = vec![job("s", &["s"], &[])];
        assert!(matches!(plan(&mut own, 1), Err(PlanError::Cycle { .. })));
        let mut unknown = vec![job("a", &["nope"], &[])];
        assert_eq!(
            plan(&mut unknown, 1),
            Err(PlanError::UnknownName {
                position: 0,
                name: "nope".into()
            })
        );
        let mut future = vec![job("a", &["7"], &[])];
        assert_eq!(
            plan(&mut future, 7),
            Err(PlanError::UnknownJob {
                position: 0,
                job: 7
            })
        );
        let mut twice = vec![job("a", &[], &[]), job("a", &[], &[])];
        assert!(matches!(
            plan(&mut twice, 1),
            Err(PlanError::DuplicateName { .. })
        ));
    }
}
