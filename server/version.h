// The daemon's version, as GetServerInfo reports it and gpustreamctl and
// the metrics print it. One constant, apart, so tools need not link the
// server to know it.
#ifndef GPUSTREAM_SERVER_VERSION_H_
#define GPUSTREAM_SERVER_VERSION_H_

namespace gpustream {

inline constexpr char kServerVersion[] = "0.1.0";

}  // namespace gpustream

#endif  // GPUSTREAM_SERVER_VERSION_H_
