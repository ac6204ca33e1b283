/* The binary interface of a gpustream CPU kernel module (ABI version 3).
 *
 * A CPU module is a shared library that exports one C function,
 *
 *   const GsModuleDef* gpustream_cpu_module(void);
 *
 * returning a table that lives as long as the library: the module's name and
 * its kernels, each with a name, its parameter kinds and an entry point. The
 * daemon validates every launch's arguments against the declared kinds before
 * calling the entry point, so a kernel only checks what depends on values
 * (element counts against buffer sizes, say).
 *
 * A kernel is called once per launch, on one of the device's execution
 * threads (shared by every queue: a kernel that blocks holds one of them),
 * and runs every thread of the grid itself: thread (b, t) of a 1-D launch is
 * index i = b * block.x + t, exactly as on a GPU. It must not keep pointers
 * past its return. Returning nonzero reports a device fault: the message
 * written to `error` becomes the queue's sticky error.
 *
 * Stopping (ABI 2): a launch that runs past the daemon's per-launch time
 * limit (gpustreamd's CPU kernel time limit, 60 s by default), or whose
 * queue is cancelled (its session closes, the daemon shuts down), is asked
 * to stop: *launch->stop_requested becomes nonzero. A kernel that can run
 * for long must poll it (gs_stop_requested(), about every millisecond of
 * work) and return soon after it reads nonzero; what it wrote so far stays
 * written. The daemon then fails the launch whatever the kernel returns:
 * DEADLINE_EXCEEDED naming the kernel and the limit, or the queue's
 * cancellation. Nothing can stop a kernel that never polls: it holds its
 * execution thread, and session teardown and daemon shutdown, until it
 * returns.
 *
 * Extents (ABI 3): each kernel may declare, for each BUFFER param, how far
 * it reaches into the buffer (GsExtent). The daemon refuses a launch whose
 * arguments would let it reach past a buffer's end (OUT_OF_RANGE) before the
 * kernel runs. A kernel that declares no extent for a BUFFER param is
 * "unchecked": where tenants are configured only tenants allowed unchecked
 * kernels may launch it. Declare every extent.
 *
 * Blocks, clusters and cooperative launches (ABI 4): a call runs the
 * blocks [first_block, first_block + block_count) of the grid, by linear
 * block index x + y*grid.x + z*grid.x*grid.y (a plain launch: one call for
 * the whole grid, first_block 0). A launch with clusters says so in
 * `cluster` ({1,1,1} without): a cluster is consecutive block indices
 * along x, then y, then z, so block (bx, by, bz) has rank
 * bx % cx + (by % cy) * cx + (bz % cz) * cx * cy in its cluster. A
 * cooperative launch (`cooperative` nonzero) calls the entry point once
 * per block, every block on a thread of its own at the same time, and
 * gs_grid_sync() is a barrier across all of them (as cooperative groups'
 * grid.sync()). Outside a cooperative launch gs_grid_sync() fails at once,
 * as grid.sync() traps on a GPU. Kernels of ABI 1 to 3 know none of this:
 * the daemon always calls them once for the whole grid.
 *
 * Versions: the daemon loads modules of ABI 1 (no stop_requested: GsLaunch
 * only grew at its end, and ABI 1 kernels never read the new field), 2 and 3
 * (GsModuleDef grew `extents` at its end, read only from modules that say
 * ABI 3: older modules' kernels load unchecked). No array element ever
 * changes size, so a module that states an older version than its header
 * still loads; never state a newer one (the daemon would read fields the
 * table lacks). ABI 4 appended GsLaunch's block range, cluster and
 * cooperative fields, which the daemon fills for every module.
 *
 * Build one with: g++ -shared -fPIC -I<repo> my_module.cc -o libmine.so
 * and put the .so in the daemon's --modules folder.
 */
#ifndef GPUSTREAM_KERNELS_CPU_GPUSTREAM_CPU_MODULE_H_
#define GPUSTREAM_KERNELS_CPU_GPUSTREAM_CPU_MODULE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_CPU_MODULE_ABI_VERSION 4
/* The oldest module ABI the daemon still loads. */
#define GS_CPU_MODULE_MIN_ABI_VERSION 1
#define GS_CPU_MODULE_ENTRY_POINT "gpustream_cpu_module"

/* Same numbering as gpustream.v1.ParamKind. */
typedef enum {
  GS_PARAM_BUFFER = 1,
  GS_PARAM_I32 = 2,
  GS_PARAM_U32 = 3,
  GS_PARAM_I64 = 4,
  GS_PARAM_U64 = 5,
  GS_PARAM_F32 = 6,
  GS_PARAM_F64 = 7,
  GS_PARAM_BYTES = 8,
} GsParamKind;

/* A BUFFER or BYTES argument: `size` bytes are addressable from `data`
 * (for a buffer: from the launch's offset to the end of the buffer). A
 * kernel must not write BYTES: every replay of a captured graph passes it
 * the same bytes. */
typedef struct {
  void* data;
  uint64_t size;
} GsSpan;

typedef struct {
  GsParamKind kind;
  union {
    GsSpan span; /* BUFFER and BYTES */
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    double f64;
  } value;
} GsArg;

typedef struct {
  uint32_t x, y, z;
} GsDim3;

typedef struct GsLaunch {
  GsDim3 grid;
  GsDim3 block;
  const GsArg* args; /* One per declared parameter, kinds already checked. */
  uint32_t num_args;
  char* error; /* Where a failing kernel writes a NUL-terminated reason. */
  size_t error_size;
  /* ABI 2. Nonzero once the daemon asks the kernel to return early (its
   * time limit passed, or its queue was cancelled); never null. Written by
   * another thread: read it with gs_stop_requested() each time. */
  const volatile int* stop_requested;
  /* ABI 4 (see "Blocks, clusters and cooperative launches"). */
  uint64_t first_block; /* The linear blocks this call runs... */
  uint64_t block_count; /* ...first_block to first_block + block_count. */
  GsDim3 cluster;       /* Blocks per cluster; {1, 1, 1} without clusters. */
  uint32_t cooperative; /* Nonzero: a cooperative launch. */
  /* A barrier across every block of a cooperative launch: returns 0 once
   * all of them have reached it, nonzero at once outside a cooperative
   * launch or when the daemon asks the kernel to stop (then return). Never
   * null; call it through gs_grid_sync(). */
  int (*grid_sync)(const struct GsLaunch* launch);
  void* daemon; /* The daemon's own; kernels leave it alone. */
} GsLaunch;

/* The grid-wide barrier of a cooperative launch (see GsLaunch::grid_sync).
 * A kernel that gets nonzero must fail or return. */
static inline int gs_grid_sync(const GsLaunch* launch) {
  return launch->grid_sync(launch);
}

/* Whether the kernel should return now (see "Stopping" above). */
static inline int gs_stop_requested(const GsLaunch* launch) {
  /* An atomic load (GCC and Clang, C and C++): the word is written by
   * another thread, and a plain read of it would be a data race. */
  return __atomic_load_n(launch->stop_requested, __ATOMIC_ACQUIRE) != 0;
}

/* Returns 0 on success, nonzero on a device fault (see `error`). */
typedef int (*GsKernelFn)(const GsLaunch* launch);

/* ABI 3. The bytes a kernel may touch through one BUFFER param, counted from
 * the argument's offset:
 *   bytes + bytes_per_element * (value of param count_param)
 *         + bytes_per_thread * (grid volume * block volume).
 * count_param is the index of an I32, U32, I64 or U64 param (a negative
 * value counts as too large), or -1 for none (then bytes_per_element must
 * be 0, and the other way round). Entries of non-BUFFER params must have
 * declared == 0. Example, fill_u32(out, value, n) writing n words:
 *   {1, 2, 0, 4, 0} for out. */
typedef struct {
  int32_t declared; /* nonzero: this param's extent is declared */
  int32_t count_param;
  uint64_t bytes;
  uint64_t bytes_per_element;
  uint64_t bytes_per_thread;
} GsExtent;

typedef struct {
  const char* name;
  const GsParamKind* params;
  uint32_t num_params;
  GsKernelFn fn;
} GsKernelDef;

typedef struct {
  uint32_t abi_version; /* GS_CPU_MODULE_ABI_VERSION */
  const char* name;
  const GsKernelDef* kernels;
  uint32_t num_kernels;
  /* ABI 3: extents[k] is kernel k's extents, one GsExtent per param
   * (num_params entries), or NULL: none declared. NULL: no kernel declares
   * any. Read only when abi_version >= 3. */
  const GsExtent* const* extents;
} GsModuleDef;

typedef const GsModuleDef* (*GsModuleEntryFn)(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUSTREAM_KERNELS_CPU_GPUSTREAM_CPU_MODULE_H_ */
