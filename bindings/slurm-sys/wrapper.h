/* Input to bindgen (see build.rs). Only the allowlisted items reach Rust. */
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

/* Exported by libslurm.so.38 (22.05) but declared only in Slurm's private
 * src/common/slurm_protocol_defs.h. Returns a static string: never free it. */
extern char *slurm_job_state_string(uint32_t inx);

/* Function-like macros (SLURM_BIT) are invisible to bindgen; an enum makes clang
 * evaluate them so that Rust sees the values slurm.h really has. */
enum saker_slurm_constants {
	SAKER_KILL_FULL_JOB = KILL_FULL_JOB,
};
