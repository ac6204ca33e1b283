// The gpustream C++ client library: include this one header.
#ifndef GPUSTREAM_CLIENT_GPUSTREAM_H_
#define GPUSTREAM_CLIENT_GPUSTREAM_H_

#include "client/buffer.h"         // IWYU pragma: export
#include "client/client.h"         // IWYU pragma: export
#include "client/event.h"          // IWYU pragma: export
#include "client/flag.h"           // IWYU pragma: export
#include "client/graph.h"          // IWYU pragma: export
#include "client/kernel_arg.h"     // IWYU pragma: export
#include "client/queue.h"          // IWYU pragma: export
#include "client/session.h"        // IWYU pragma: export
#include "client/shared_buffer.h"  // IWYU pragma: export

#endif  // GPUSTREAM_CLIENT_GPUSTREAM_H_
