//! Jobs as submitted, and what a submission is checked against: the job table (what
//! agents need to run each job), the runtime-estimate classes of tag sets, the numbers
//! of named resources, and why a job was cancelled for its dependency.

use std::collections::HashMap;

use saker_core::JobId;

use super::jobs::JobTable;
use super::resources::ResourceNames;

#[derive(Debug)]
pub(super) struct Submissions {
    pub jobs: JobTable,
    /// Runtime estimate class of each set of tags (sorted), numbered from 1.
    pub classes: HashMap<Vec<String>, u32>,
    /// The custom resource kinds this pilot has numbered.
    pub resource_names: ResourceNames,
    /// Jobs cancelled because a job they needed to succeed did not, with that job
    /// (their results say so), until they finish.
    pub dependency_failed: HashMap<JobId, JobId>,
}
