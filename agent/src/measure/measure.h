/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Measurements: kperfmon's metrics on code resources of the live kernel or
 * of running processes, as a handle the CLI (`hotpathd measure`) and the
 * daemon drive alike.
 *
 *   hp_measure_open(spec)   resolve the resources, choose a mechanism per
 *                           metric, load and attach the probes: ARMED
 *   hp_measure_read()       the values of the interval since the last read
 *   hp_measure_total()      the values since open (does not start an interval)
 *   hp_measure_wait()       sleep until the target exits or a timeout
 *   hp_measure_state()      ARMED, RUNNING, TARGET_EXITED or FAILED (with why)
 *   hp_measure_edges()      derived edge counts of the measured functions
 *   hp_measure_close()      detach everything, free the handle
 *
 * Everything is aggregated in the kernel (per-CPU BPF maps) and read on
 * demand: a read costs one map lookup per row plus one per open timer frame,
 * whatever the event rate. A measurement of a process ends cleanly when the
 * process exits: its probes are detached, the state becomes TARGET_EXITED
 * and the values counted until then stay readable.
 *
 * Threads: every call takes the handle's lock, so one handle may be driven
 * from a worker thread while other threads read it (for instance the daemon's
 * stream loop taking hp_measure_read between two waits of the worker). Close
 * a handle only once no other call on it can be in progress. Handles are
 * independent: several may run at once, on the same or different targets.
 * The kernel model passed in the environment is only read and must outlive
 * the handle.
 */
#ifndef HOTPATH_MEASURE_H
#define HOTPATH_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/caps.h"
#include "measure/edges.h"
#include "measure/mechanism.h"
#include "measure/moved.h"
#include "measure/resolve.h"
#include "measure/spec.h"
#include "model/model.h"
#include "target/target.h"

/* Rows (functions plus blocks) one measurement serves at most. */
#define HP_MEASURE_MAX_ROWS 65536
/* Processes one command-name target may cover. */
#define HP_MEASURE_MAX_PIDS 64

/* What to measure. Strings are copied by hp_measure_open. */
struct hp_measure_spec {
	enum hp_measure_target_kind target; /* KERNEL, PID or COMM */
	int pid;                            /* PID: the process */
	const char *comm;                   /* COMM: every running process with this command name */
	/* The resources, one of two ways: words as written (the command line's,
	 * parsed here, see spec.h), or already parsed (resource_specs, e.g.
	 * addresses the daemon looked up by catalog and function index). */
	const char *const *resources;
	const struct hp_resource_spec *resource_specs;
	size_t nresources;
	uint32_t metrics; /* HP_METRIC_BIT set; COUNT is measured with any timer, for per-call values */
	bool blocks;      /* add a row for every basic block of each function resource */
	/* Per resource word (NULL = none): add the rows of its function's blocks,
	 * as `blocks` does for every word. */
	const bool *resource_blocks;
	/* Predicates, applied in BPF to every probe hit and sample: */
	int where_pid;            /* only this process (thread group id); 0 = any */
	const char *where_comm;   /* only threads with this command name; NULL = any */
	const char *where_cgroup; /* only threads in this cgroup v2 (a path, absolute or under the cgroup2 mount) */
	/* Serve what can be served and mark the rest unavailable (with the
	 * reason) instead of refusing the whole request. */
	bool allow_partial;
	unsigned sample_hz; /* sampled block counts: samples per second per CPU; 0 = 997 */
};

/* What the caller already has. Anything NULL is opened or probed by hp_measure_open. */
struct hp_measure_env {
	struct hp_model *kernel; /* the live kernel's model (the daemon keeps one) */
	/* PID targets: the process's model (the daemon's attached target), so
	 * rows index the modules it announced; it must be the model of spec.pid
	 * and outlive the handle. NULL = parse the process. */
	struct hp_model *process;
	const struct hp_caps *caps; /* the host's probed capabilities */
	/* Without caps: the capability cache's folder (host/caps_cache.h);
	 * NULL = HP_CAPS_CACHE_DIR, "" = probe without a cache. */
	const char *caps_cache_dir;
	/* Installed copies in the measured process (PID targets): probes of a
	 * function or block that moved go to its copy and count for the
	 * original's row; a block the copy's layout emptied is unavailable.
	 * Copied by hp_measure_open. */
	const struct hp_moved_code *moved;
	size_t nmoved;
	/* The original bytes under those installs' patches (the entry jumps),
	 * so the process's code is modelled as it was planned. */
	const struct hp_byte_patch *overlay;
	size_t noverlay;
};

enum hp_measure_error {
	HP_MEASURE_E_USAGE = 1,       /* the spec itself is wrong (no resources, bad word, bad predicate) */
	HP_MEASURE_E_NOT_FOUND = 2,   /* no such process, function, or block start */
	HP_MEASURE_E_UNAVAILABLE = 3, /* a requested metric cannot be served on this host / for this code */
	HP_MEASURE_E_LIMIT = 4,       /* too many rows, probes or processes */
	HP_MEASURE_E_SYSTEM = 5,      /* a system call failed (memory, permissions, the kernel refused) */
};

enum hp_measure_state {
	HP_MEASURE_ARMED = 0,         /* probes attached, nothing counted yet (the code has not run) */
	HP_MEASURE_RUNNING = 1,       /* counting */
	HP_MEASURE_TARGET_EXITED = 2, /* the process(es) exited: probes detached, data kept */
	HP_MEASURE_FAILED = 3,        /* stopped by an error (hp_measure_state says which) */
};
const char *hp_measure_state_name(enum hp_measure_state s); /* "armed", "running", "target_exited", "failed" */

/* How one metric of one row is served. */
struct hp_metric_info {
	bool requested;            /* in spec.metrics (and applicable to the row kind) */
	bool available;            /* served; else reason says why not */
	enum hp_value_label label; /* exact, sampled or estimate */
	const char *mechanism;     /* "uprobe_multi+uretprobe_multi+tp_btf"; "" when unavailable */
	const char *reason;        /* why unavailable; "" when available */
};

/* One row: a function or one of its blocks. Pointers stay valid until close. */
struct hp_measure_row {
	enum hp_row_kind kind; /* HP_ROW_FUNCTION or HP_ROW_BLOCK (see resolve.h) */
	const char *resource;  /* the request's word this row came from */
	const char *function;  /* function name */
	const char *module;    /* "vmlinux", a kernel module, or an ELF path */
	uint32_t module_index; /* the module's and the function's positions in the target's model */
	uint32_t function_index;
	uint64_t function_address; /* absolute, on this host / in this process */
	uint32_t function_size;
	uint64_t block_address; /* block rows: absolute start address */
	uint32_t block_offset;  /* block rows: from the function start */
	uint32_t block_size;    /* block rows: bytes */
	uint32_t function_row;  /* block rows: index of their function's row, or HP_ROW_NONE */
	uint64_t run_address;   /* where it is probed: its address, or its installed copy's */
	struct hp_metric_info metric[HP_METRIC_N];
};

/* One value of one metric of one row. unit and mechanism point into the handle: valid until close. */
struct hp_metric_value {
	bool present;   /* requested, available and defined (per-call needs calls) */
	double value;   /* in unit */
	uint64_t total; /* the integer behind it where there is one (counts, ns); else 0 */
	const char *unit;
	enum hp_value_label label;
	const char *mechanism;
};

struct hp_measure_row_values {
	struct hp_metric_value v[HP_METRIC_N]; /* indexed by enum hp_metric */
	struct hp_metric_value wall_per_call;  /* ns per completed-or-counted call (wall / count) */
	struct hp_metric_value vtime_per_call; /* ns per call (vtime / count) */
	uint64_t exits;                        /* timed calls that completed in the interval */
	uint64_t samples;                      /* sampled rows: the samples behind count */
};

/* Values of every row over an interval (or since open). */
struct hp_measure_reading {
	int64_t start_unix_ns, end_unix_ns;
	double seconds; /* monotonic length of the interval */
	enum hp_measure_state state;
	size_t nrows;
	struct hp_measure_row_values *rows; /* [nrows], owned: free with hp_measure_reading_free */
	uint64_t samples_total;             /* every sample taken (all code) when a row is sampled */
	uint64_t samples_lost;
	uint64_t frames_dropped;  /* calls that could not be timed (frame table full) */
	uint64_t exits_unmatched; /* exits whose entry was before the probes (not timed) */
};

struct hp_measure;

/*
 * Open a measurement. Returns 0 and *out, or -HP_MEASURE_E_* with one line in
 * err saying what and why (the missing capability, the unknown resource with
 * candidates, the address inside a block). Nothing stays attached on failure.
 */
int hp_measure_open(const struct hp_measure_spec *spec, const struct hp_measure_env *env, struct hp_measure **out,
		    char *err, size_t errlen);

/* Rows, in request order (a function's blocks follow its row). */
size_t hp_measure_nrows(const struct hp_measure *h);
const struct hp_measure_row *hp_measure_rows(const struct hp_measure *h);
/* The processes measured (PID and COMM targets); returns how many, fills up to max. */
size_t hp_measure_pids(const struct hp_measure *h, int *pids, size_t max);
/* The kernel release / process description, for reports. */
const char *hp_measure_target_desc(const struct hp_measure *h);
/* The target's code model (kernel release and build id, modules), read-only. */
const struct hp_model *hp_measure_model(const struct hp_measure *h);

/* Values since the previous hp_measure_read (or open). */
int hp_measure_read(struct hp_measure *h, struct hp_measure_reading *out);
/* Values since open. */
int hp_measure_total(struct hp_measure *h, struct hp_measure_reading *out);
void hp_measure_reading_free(struct hp_measure_reading *r);

/*
 * Wait up to timeout_ms for the target to exit (process targets; the kernel
 * never exits). Returns 1 when the state changed to TARGET_EXITED, 0 on
 * timeout, or a negative errno.
 */
int hp_measure_wait(struct hp_measure *h, int timeout_ms);
/* Current state; detail (may be NULL) gets a sentence for EXITED/FAILED. */
enum hp_measure_state hp_measure_state(struct hp_measure *h, char *detail, size_t len);

/*
 * Edges of every function whose blocks are all rows, derived from reading r
 * (KernInst §4; see edges.h): one result per function row, in row order, in
 * *out (malloc'd, free with hp_measure_edges_free). Sampled block counts are
 * not execution counts: edges are derived only from exact block counts.
 */
struct hp_function_edges {
	size_t function_row; /* the function's row */
	struct hp_edge_result edges;
	uint32_t nblocks;
	uint32_t *block_rows;    /* [nblocks]: the row of each block, HP_ROW_NONE for an unreachable trap */
	uint32_t *block_offsets; /* [nblocks]: each block's offset from the function start */
	bool sampled;            /* derived from sampled block counts: every edge an estimate, in samples */
};
int hp_measure_edges(struct hp_measure *h, const struct hp_measure_reading *r, struct hp_function_edges **out,
		     size_t *nout);
/*
 * As hp_measure_edges; with from_sampled, a function whose block counts are
 * all sampled (none exact) also gets edges, derived from its sample counts
 * and marked sampled: shares of samples, estimates whatever the derivation
 * says, never execution counts.
 */
int hp_measure_edges_from(struct hp_measure *h, const struct hp_measure_reading *r, bool from_sampled,
			  struct hp_function_edges **out, size_t *nout);
void hp_measure_edges_free(struct hp_function_edges *e, size_t n);

void hp_measure_close(struct hp_measure *h);

#endif
