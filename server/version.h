// The project's one version number: the daemon reports it (GetServerInfo,
// metrics), gpustreamctl and the C++ client carry it, and the Python
// package's is checked against it by its tests. Apart, so tools and the
// client need not link the server to know it.
#ifndef GPUSTREAM_SERVER_VERSION_H_
#define GPUSTREAM_SERVER_VERSION_H_

namespace gpustream {

inline constexpr char kServerVersion[] = "0.1.0";

}  // namespace gpustream

#endif  // GPUSTREAM_SERVER_VERSION_H_
