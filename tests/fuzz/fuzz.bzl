"""gs_fuzz_target: a libFuzzer target and the test that replays its corpus."""

def gs_fuzz_target(name, srcs, deps = [], data = [], local_defines = [], corpus = None, size = "small", tags = []):
    """A fuzz target whose sources define LLVMFuzzerTestOneInput.

    Defines:
      <name>_lib: the target's code (alwayslink, so the entry point stays).
      <name>: under --config=fuzz (--define=gs_fuzz=1) a libFuzzer binary;
        otherwise the same code with replay_main.cc, which runs the inputs
        named on its command line.
      <name>_corpus_test: replays tests/fuzz/corpus/<corpus> (seeds and
        regression inputs) in every configuration.

    Args:
      name: the target's name; also its corpus folder unless `corpus` says.
      srcs: sources, one of which defines LLVMFuzzerTestOneInput.
      deps: what they use.
      data: run-time files (found through the runfiles tree).
      local_defines: defines for `srcs` only.
      corpus: the folder under tests/fuzz/corpus (default `name`).
      size: of the corpus test.
      tags: of the corpus test (`no_tsan`: single-threaded code, which
        tools/test.sh does not run under ThreadSanitizer).
    """
    corpus = corpus or name
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        data = data,
        local_defines = local_defines,
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        testonly = True,
        deps = [":" + name + "_lib"] + select({
            "//tests/fuzz:fuzz_build": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        linkopts = select({
            "//tests/fuzz:fuzz_build": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = size,
        tags = tags,
        args = ["tests/fuzz/corpus/" + corpus],
        data = native.glob(["corpus/" + corpus + "/**"]),
        deps = [
            ":" + name + "_lib",
            "//tests/fuzz:replay_main",
        ],
    )
