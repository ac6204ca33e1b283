/* The binary interface of a gpustream CPU kernel module (ABI version 1).
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
 * A kernel is called once per launch, on the launching queue's worker thread,
 * and runs every thread of the grid itself: thread (b, t) of a 1-D launch is
 * index i = b * block.x + t, exactly as on a GPU. It must not keep pointers
 * past its return. Returning nonzero reports a device fault: the message
 * written to `error` becomes the queue's sticky error.
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

#define GS_CPU_MODULE_ABI_VERSION 1
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
 * (for a buffer: from the launch's offset to the end of the buffer). */
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

typedef struct {
  GsDim3 grid;
  GsDim3 block;
  const GsArg* args; /* One per declared parameter, kinds already checked. */
  uint32_t num_args;
  char* error; /* Where a failing kernel writes a NUL-terminated reason. */
  size_t error_size;
} GsLaunch;

/* Returns 0 on success, nonzero on a device fault (see `error`). */
typedef int (*GsKernelFn)(const GsLaunch* launch);

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
} GsModuleDef;

typedef const GsModuleDef* (*GsModuleEntryFn)(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUSTREAM_KERNELS_CPU_GPUSTREAM_CPU_MODULE_H_ */
