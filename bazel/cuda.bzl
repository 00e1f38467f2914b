"""cuda_library: .cu files compiled by nvcc in a genrule, linked with the static CUDA runtime.

With --define=cuda=off (--config=nocuda) the genrules write empty placeholders that the library
leaves out (it is then empty); targets choose their CPU-only sources with select(["//:cuda_on"]).
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90a for Hopper's own instructions (wgmma), sm_80 for Ampere, PTX for newer GPUs.
NVCC_ARCH_FLAGS = (
    "-gencode=arch=compute_90a,code=sm_90a " +
    "-gencode=arch=compute_80,code=sm_80 " +
    "-gencode=arch=compute_90,code=compute_90"
)

NVCC_FLAGS = (
    "-c -O3 -std=c++17 -Xcompiler -fPIC --expt-relaxed-constexpr -lineinfo " +
    "-Xptxas -warn-spills -I. -I$(GENDIR) " + NVCC_ARCH_FLAGS
)

# nvcc names its temporary files tmpxft_<pid>_<counter>-* in $TMPDIR and removes that prefix's
# files when it exits. In Bazel's sandbox every action runs as pid 2 with the host's /tmp, so
# two nvcc runs at once share a prefix and delete each other's files ("Could not open input file
# /tmp/tmpxft_00000002_00000007-10_flex_prefill.compute_90a.cubin", session 27's CI, when several
# .cu files recompiled together): each run gets its own directory.
_NVCC_IN_OWN_TMPDIR = "T=$$(mktemp -d) && TMPDIR=$$T {}; s=$$?; rm -rf \"$$T\"; exit $$s"

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], nvcc_flags = "", **kwargs):
    """A cc_library whose .cu srcs are compiled by nvcc.

    Args:
      name: target name.
      srcs: .cu files, one object each.
      hdrs: headers of this library (visible to nvcc and to dependents).
      nvcc_hdrs: other headers the .cu files include (labels or files from other packages).
      deps: cc deps of the resulting library.
      nvcc_flags: extra nvcc flags.
      **kwargs: passed to cc_library.
    """
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj.replace(".", "_"),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = select({
                "//:cuda_on": _NVCC_IN_OWN_TMPDIR.format(" ".join([NVCC, NVCC_FLAGS, nvcc_flags, "-o $@ $(location " + src + ")"])),
                "//conditions:default": "touch $@",
            }),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = select({
            "//:cuda_on": objs,
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        deps = deps + select({
            "//:cuda_on": ["@local_cuda//:cudart"],
            "//conditions:default": [],
        }),
        **kwargs
    )
