//! Every call into libslurm; the only module allowed `unsafe`.
//!
//! Ownership rules followed here (Slurm 22.05):
//! * strings we pass are `CString`s that outlive the call; libslurm copies what it keeps;
//! * `slurm_hostlist_shift` returns `malloc`ed strings: copied, then `libc::free`d;
//! * `slurm_load_job`, `slurm_load_job_user` and `slurm_submit_batch_job` allocate
//!   their responses: freed by a guard with `slurm_free_job_info_msg` /
//!   `slurm_free_submit_response_response_msg`;
//! * `slurm_strerror` and `slurm_job_state_string` return static strings: never freed;
//! * `slurm_get_errno` is per thread: read right after the failing call.

use std::ffi::{CStr, CString, OsStr, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use saker_slurm_sys as sys;

use crate::config::{self, ConfigSource};
use crate::error::{SlurmErrno, SlurmError};
use crate::{BatchRequest, JobInfo, SlurmJobId};

/// Calls `slurm_init` once per process, with the configuration [`config`] found, so
/// that libslurm never reaches its `fatal()` for a missing configuration.
fn ensure_initialized() -> Result<(), SlurmError> {
    static INITIALIZED: OnceLock<()> = OnceLock::new();
    if INITIALIZED.get().is_some() {
        return Ok(());
    }
    let path = match config::find_process_config()? {
        ConfigSource::File(path) => Some(c_string(path.as_os_str(), "SLURM_CONF path")?),
        ConfigSource::Server => None,
    };
    INITIALIZED.get_or_init(|| {
        // SAFETY: `path` is NULL or a NUL-terminated string alive for the call (libslurm
        // copies it). The file is readable or a server is named, so libslurm does not
        // fall into fatal(); the OnceLock makes this the process's only call.
        unsafe { sys::slurm_init(path.as_ref().map_or(ptr::null(), |path| path.as_ptr())) }
    });
    Ok(())
}

fn last_errno() -> SlurmErrno {
    // SAFETY: reads libslurm's thread-local errno; no preconditions.
    let code = unsafe { sys::slurm_get_errno() };
    // SAFETY: slurm_strerror accepts any number and returns a static string (or the
    // static text of strerror); it is only read.
    let message = unsafe { optional_string(sys::slurm_strerror(code)) }.unwrap_or_default();
    SlurmErrno { code, message }
}

fn c_string(text: impl AsRef<OsStr>, field: &'static str) -> Result<CString, SlurmError> {
    CString::new(text.as_ref().as_bytes()).map_err(|_| SlurmError::InteriorNul { field })
}

fn optional_c_string(
    text: Option<impl AsRef<OsStr>>,
    field: &'static str,
) -> Result<Option<CString>, SlurmError> {
    text.map(|text| c_string(text, field)).transpose()
}

fn pointer_or_null(text: &Option<CString>) -> *mut c_char {
    // libslurm's request fields are `char *` but only read on submission.
    text.as_ref()
        .map_or(ptr::null_mut(), |text| text.as_ptr().cast_mut())
}

/// Copies a C string; NULL and "" are `None`.
///
/// # Safety
/// `pointer` is NULL or points to a NUL-terminated string alive for this call.
unsafe fn optional_string(pointer: *const c_char) -> Option<String> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    let text = unsafe { CStr::from_ptr(pointer) }.to_string_lossy();
    (!text.is_empty()).then(|| text.into_owned())
}

fn system_time(seconds: sys::time_t) -> Option<SystemTime> {
    u64::try_from(seconds)
        .ok()
        .filter(|&seconds| seconds > 0)
        .map(|seconds| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

// ----------------------------------------------------------------- hostlists

/// Destroys a hostlist when dropped.
struct Hostlist(sys::hostlist_t);

impl Drop for Hostlist {
    fn drop(&mut self) {
        // SAFETY: the hostlist came from slurm_hostlist_create, is non-NULL, and is
        // destroyed exactly once, here.
        unsafe { sys::slurm_hostlist_destroy(self.0) }
    }
}

pub(crate) fn expand_hostlist(expression: &str) -> Result<Vec<String>, SlurmError> {
    let expression_c = c_string(expression, "hostlist expression")?;
    // SAFETY: a NUL-terminated string alive for the call; libslurm copies what it
    // keeps. Hostlist functions need no configuration.
    let list = unsafe { sys::slurm_hostlist_create(expression_c.as_ptr()) };
    if list.is_null() {
        return Err(SlurmError::HostlistRejected {
            expression: expression.to_owned(),
        });
    }
    let list = Hostlist(list);
    let mut hosts = Vec::new();
    loop {
        // SAFETY: `list` is a live hostlist owned by the guard.
        let host = unsafe { sys::slurm_hostlist_shift(list.0) };
        if host.is_null() {
            return Ok(hosts);
        }
        // SAFETY: a NUL-terminated string we now own; copied before it is freed.
        let name = unsafe { CStr::from_ptr(host) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: slurm_hostlist_shift allocates with malloc (not xmalloc) and hands
        // ownership to the caller; freed once.
        unsafe { libc::free(host.cast()) };
        hosts.push(name);
    }
}

// ------------------------------------------------------------------ job info

/// Frees a `slurm_load_job` response when dropped.
struct JobInfoMessage(*mut sys::job_info_msg_t);

impl JobInfoMessage {
    /// The response's job records.
    fn records(&self) -> &[sys::slurm_job_info_t] {
        // SAFETY: a successful slurm_load_job(_user) response: `job_array` holds
        // `record_count` initialized records (or is NULL when there are none); they
        // live as long as `self`, which the returned slice borrows.
        unsafe {
            let response = &*self.0;
            if response.job_array.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(response.job_array, response.record_count as usize)
            }
        }
    }
}

impl Drop for JobInfoMessage {
    fn drop(&mut self) {
        // SAFETY: allocated by slurm_load_job, non-NULL, freed exactly once, here.
        unsafe { sys::slurm_free_job_info_msg(self.0) }
    }
}

pub(crate) fn load_job(job_id: SlurmJobId) -> Result<JobInfo, SlurmError> {
    ensure_initialized()?;
    let mut message: *mut sys::job_info_msg_t = ptr::null_mut();
    // SHOW_DETAIL asks for job_resrcs (CPUs per node); SHOW_ALL includes hidden
    // partitions.
    let flags = (sys::SHOW_DETAIL | sys::SHOW_ALL) as u16;
    // SAFETY: `message` is a valid out-pointer; on success libslurm stores a response
    // that we own and free (JobInfoMessage).
    let rc = unsafe { sys::slurm_load_job(&mut message, job_id.0, flags) };
    if rc != 0 {
        let errno = last_errno();
        if errno.code == sys::ESLURM_INVALID_JOB_ID as i32 {
            return Err(SlurmError::UnknownJob { job_id });
        }
        return Err(SlurmError::Call {
            call: "slurm_load_job",
            source: errno,
        });
    }
    if message.is_null() {
        return Err(SlurmError::UnknownJob { job_id });
    }
    let message = JobInfoMessage(message);
    let records = message.records();
    // An array or heterogeneous job id returns every member: take the one asked for.
    let record = records
        .iter()
        .find(|record| record.job_id == job_id.0)
        .or(records.first())
        .ok_or(SlurmError::UnknownJob { job_id })?;
    job_info_from(record)
}

/// Every job of this process's user the controller still knows
/// (`slurm_load_job_user`).
pub(crate) fn load_own_jobs() -> Result<Vec<JobInfo>, SlurmError> {
    ensure_initialized()?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut message: *mut sys::job_info_msg_t = ptr::null_mut();
    let flags = sys::SHOW_ALL as u16;
    // SAFETY: `message` is a valid out-pointer; on success libslurm stores a response
    // that we own and free (JobInfoMessage).
    let rc = unsafe { sys::slurm_load_job_user(&mut message, uid, flags) };
    if rc != 0 {
        return Err(SlurmError::Call {
            call: "slurm_load_job_user",
            source: last_errno(),
        });
    }
    if message.is_null() {
        return Ok(Vec::new());
    }
    JobInfoMessage(message)
        .records()
        .iter()
        .map(job_info_from)
        .collect()
}

fn job_info_from(record: &sys::slurm_job_info_t) -> Result<JobInfo, SlurmError> {
    // SAFETY (for the string reads below): every `char *` of a record is NULL or a
    // NUL-terminated string owned by the response, alive while `record` is.
    let nodes = match unsafe { optional_string(record.nodes) } {
        Some(list) => expand_hostlist(&list)?,
        None => Vec::new(),
    };
    let cpus_per_node = cpus_per_node(record, nodes.len());
    let time_limit = match record.time_limit {
        sys::INFINITE | sys::NO_VAL => None,
        minutes => Some(Duration::from_secs(u64::from(minutes) * 60)),
    };
    // As scontrol: an unlimited job's end is "Unknown" until it has really ended
    // (slurmctld stores start + one year meanwhile).
    let end_time = system_time(record.end_time)
        .filter(|&end| record.time_limit != sys::INFINITE || end <= SystemTime::now());
    // SAFETY: job_state_string accepts any value and returns a static string.
    let state = unsafe { optional_string(sys::slurm_job_state_string(record.job_state)) }
        .unwrap_or_default();
    Ok(JobInfo {
        job_id: SlurmJobId(record.job_id),
        // SAFETY: see above.
        name: unsafe { optional_string(record.name) }.unwrap_or_default(),
        // SAFETY: see above.
        partition: unsafe { optional_string(record.partition) }.unwrap_or_default(),
        state,
        nodes,
        // SAFETY: see above.
        batch_host: unsafe { optional_string(record.batch_host) },
        cpus_per_node,
        num_cpus: record.num_cpus,
        start_time: system_time(record.start_time),
        end_time,
        time_limit,
    })
}

/// CPUs on each allocated node (node ids are positions in the expanded node list), or
/// empty if the record carries no resources (pending) or libslurm says -1.
fn cpus_per_node(record: &sys::slurm_job_info_t, nodes: usize) -> Vec<u32> {
    if record.job_resrcs.is_null() {
        return Vec::new();
    }
    let mut counts = Vec::with_capacity(nodes);
    for node in 0..nodes {
        let Ok(node) = c_int::try_from(node) else {
            return Vec::new();
        };
        // SAFETY: `job_resrcs` is non-NULL and owned by the live response; libslurm
        // checks `node` against the allocation and returns -1 when out of range.
        let count = unsafe { sys::slurm_job_cpus_allocated_on_node_id(record.job_resrcs, node) };
        match u32::try_from(count) {
            Ok(count) => counts.push(count),
            Err(_) => return Vec::new(),
        }
    }
    counts
}

// ---------------------------------------------------------------- submission

/// Frees a `slurm_submit_batch_job` response when dropped.
struct SubmitResponse(*mut sys::submit_response_msg_t);

impl Drop for SubmitResponse {
    fn drop(&mut self) {
        // SAFETY: allocated by slurm_submit_batch_job, non-NULL, freed once, here.
        unsafe { sys::slurm_free_submit_response_response_msg(self.0) }
    }
}

pub(crate) fn submit_batch(request: &BatchRequest) -> Result<SlurmJobId, SlurmError> {
    // Everything the descriptor points to lives in these locals until the call returns.
    let script = c_string(&request.script, "script")?;
    let name = optional_c_string(request.name.as_ref(), "name")?;
    let partition = optional_c_string(request.partition.as_ref(), "partition")?;
    let account = optional_c_string(request.account.as_ref(), "account")?;
    let dependency = optional_c_string(request.dependency.as_ref(), "dependency")?;
    let stdout = optional_c_string(request.stdout.as_ref(), "stdout")?;
    let stderr = optional_c_string(request.stderr.as_ref(), "stderr")?;
    let working_directory = match &request.working_directory {
        Some(directory) => c_string(directory, "working_directory")?,
        None => {
            let directory = std::env::current_dir().map_err(|_| SlurmError::InvalidRequest {
                field: "working_directory",
                reason: "not given, and the current directory is unreadable",
            })?;
            c_string(directory, "working_directory")?
        }
    };
    let submit_host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let environment: Vec<CString> = crate::submit::job_environment(
        request,
        std::env::vars_os(),
        std::env::current_dir().ok().as_deref(),
        submit_host.as_deref().map(str::trim),
    )
    .into_iter()
    .map(|pair| {
        CString::new(pair).map_err(|_| SlurmError::InteriorNul {
            field: "environment",
        })
    })
    .collect::<Result<_, _>>()?;
    let mut environment_pointers: Vec<*mut c_char> = environment
        .iter()
        .map(|pair| pair.as_ptr().cast_mut())
        .chain([ptr::null_mut()])
        .collect();
    let environment_size =
        u32::try_from(environment.len()).map_err(|_| SlurmError::InvalidRequest {
            field: "environment",
            reason: "too many variables",
        })?;

    ensure_initialized()?;
    let mut descriptor = std::mem::MaybeUninit::<sys::job_desc_msg_t>::zeroed();
    // SAFETY: a writable job_desc_msg_t; slurm_init_job_desc_msg sets every field to
    // its "unset" value (it is plain integers and pointers, so zeroed is valid too).
    let mut descriptor = unsafe {
        sys::slurm_init_job_desc_msg(descriptor.as_mut_ptr());
        descriptor.assume_init()
    };
    descriptor.script = script.as_ptr().cast_mut();
    descriptor.name = pointer_or_null(&name);
    descriptor.partition = pointer_or_null(&partition);
    descriptor.account = pointer_or_null(&account);
    descriptor.dependency = pointer_or_null(&dependency);
    descriptor.std_out = pointer_or_null(&stdout);
    descriptor.std_err = pointer_or_null(&stderr);
    descriptor.work_dir = working_directory.as_ptr().cast_mut();
    if request.exclusive {
        // JOB_SHARED_NONE (a #define bindgen does not carry), as `sbatch --exclusive`.
        descriptor.shared = 0;
    }
    descriptor.environment = environment_pointers.as_mut_ptr();
    descriptor.env_size = environment_size;
    descriptor.min_nodes = request.nodes;
    descriptor.max_nodes = request.nodes;
    if let Some(minutes) = request.time_limit_minutes {
        descriptor.time_limit = minutes;
    }
    if let Some(per_node) = request.ntasks_per_node {
        descriptor.ntasks_per_node = per_node;
        // validate() bounds the product below NO_VAL.
        descriptor.num_tasks = request.nodes * u32::from(per_node);
    }
    // SAFETY: getuid/getgid cannot fail. slurmctld runs the job as this user, as sbatch
    // asks.
    unsafe {
        descriptor.user_id = libc::getuid();
        descriptor.group_id = libc::getgid();
    }

    let mut response: *mut sys::submit_response_msg_t = ptr::null_mut();
    // SAFETY: every pointer in `descriptor` refers to a CString or array above that
    // outlives the call, `environment_pointers` has `env_size` entries (plus NULL), and
    // libslurm only reads them (it restores the alloc_node it fills in). `response` is
    // a valid out-pointer; on success we own and free the response.
    let rc = unsafe { sys::slurm_submit_batch_job(&mut descriptor, &mut response) };
    if rc != 0 {
        let errno = last_errno();
        if !response.is_null() {
            drop(SubmitResponse(response));
        }
        return Err(SlurmError::Call {
            call: "slurm_submit_batch_job",
            source: errno,
        });
    }
    if response.is_null() {
        return Err(SlurmError::Call {
            call: "slurm_submit_batch_job",
            source: SlurmErrno {
                code: 0,
                message: "succeeded without a response".to_owned(),
            },
        });
    }
    let response = SubmitResponse(response);
    // SAFETY: a non-NULL response from a successful call, alive until `response` drops.
    Ok(SlurmJobId(unsafe { (*response.0).job_id }))
}

// ------------------------------------------------------------------ cancel

pub(crate) fn kill_job(job_id: SlurmJobId, signal: Option<u16>) -> Result<(), SlurmError> {
    ensure_initialized()?;
    // SIGKILL with no flags is scancel's cancel (the job ends CANCELLED); any other
    // signal goes to the batch script and every step (scancel --full).
    let (signal, flags) = match signal {
        None => (libc::SIGKILL as u16, 0),
        Some(signal) => (signal, sys::SAKER_KILL_FULL_JOB as u16),
    };
    // SAFETY: plain integers; no pointers.
    let rc = unsafe { sys::slurm_kill_job(job_id.0, signal, flags) };
    if rc == 0 {
        return Ok(());
    }
    let errno = last_errno();
    match errno.code {
        code if code == sys::ESLURM_INVALID_JOB_ID as i32 => Err(SlurmError::UnknownJob { job_id }),
        code if code == sys::ESLURM_ALREADY_DONE as i32 => Err(SlurmError::JobFinished { job_id }),
        _ => Err(SlurmError::Call {
            call: "slurm_kill_job",
            source: errno,
        }),
    }
}
