// Stream capture as the rest of the emulation sees it: the hooks that
// enqueueing work and the potentially unsafe calls go through (fake_gpu.h
// has the entry points and the rules).
#ifndef TESTS_FAKE_GPU_FAKE_GRAPH_H_
#define TESTS_FAKE_GPU_FAKE_GRAPH_H_

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {

// Whether `stream` is capturing. If it is, a `capturable` op is recorded
// (kSuccess in *result), anything else is refused and invalidates the
// capture (kStreamCaptureUnsupported). Cheap when nothing captures
// anywhere. Thread-safe.
bool Captured(Stream& stream, Op& op, bool capturable, Result* result);

// For a call that queries or synchronizes `stream`:
// kStreamCaptureUnsupported (invalidating the capture) if it is capturing.
Result CheckNotCapturing(const Stream& stream);

// For a potentially unsafe call (one that allocates outside any stream):
// kStreamCaptureUnsupported, invalidating the captures that prohibit it,
// when a capture's mode prohibits the calling thread from making it.
Result CheckCaptureSafe();

// For a call that synchronizes `ctx` (a synchronizing free, a context
// synchronize): kStreamCaptureUnsupported, invalidating them, when any
// stream of `ctx` is capturing, whatever the capture's mode and thread (a
// capturing stream cannot be synchronized).
Result CheckNoCaptureIn(const Context& ctx);

// Forgets the graphs and executable graphs of a destroyed context (their
// handles become stale) and ends its captures.
void ReleaseGraphs(const Context* ctx);

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_GRAPH_H_
