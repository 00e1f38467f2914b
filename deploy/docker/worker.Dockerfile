# syntax=docker/dockerfile:1.6
# spattn-worker image. Build from the repository root:
#   docker build -f deploy/docker/worker.Dockerfile -t spattn/worker:0.1.0 .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg CUDA=0 -t spattn/worker:cpu .
# Stage 1 builds with the same offline Bazel set-up as a developer checkout (deploy/setup.sh:
# Debian 12's bazel-bootstrap and system gRPC/protobuf/RocksDB/prometheus-cpp), plus NVIDIA's CUDA
# compiler from its debian12 repository when CUDA=1. The CUDA runtime is linked statically, so
# stage 2 is a slim Debian with the shared libraries the binaries need; the NVIDIA container
# toolkit injects the driver (NVIDIA_* variables below).

ARG DEBIAN=debian:bookworm

FROM ${DEBIAN} AS build
ARG CUDA=1
ARG CUDA_VERSION=13-0
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates curl gnupg \
 && rm -rf /var/lib/apt/lists/*
RUN if [ "$CUDA" = "1" ]; then \
      curl -fsSLo /tmp/cuda-keyring.deb \
        https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && apt-get update -q \
      && apt-get install -y -q --no-install-recommends \
           cuda-nvcc-${CUDA_VERSION} cuda-cudart-dev-${CUDA_VERSION} cuda-cccl-${CUDA_VERSION} \
      && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY deploy/setup.sh deploy/setup.sh
RUN ./deploy/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# setup.sh writes .bazel-config: --config=cuda when /usr/local/cuda/bin/nvcc exists.
RUN ./deploy/setup.sh \
 && bazel build -c opt $(cat .bazel-config) //server:spattn-worker //client:spattnctl \
 && install -D -m 0755 bazel-bin/server/spattn-worker /out/usr/local/bin/spattn-worker \
 && install -D -m 0755 bazel-bin/client/spattnctl /out/usr/local/bin/spattnctl \
 && bazel shutdown

FROM debian:bookworm-slim AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# Exactly the shared libraries of spattn-worker and spattnctl (checked by
# deploy/docker/tests/test_docker.py against ldd of the Bazel-built binaries).
RUN apt-get update -q && apt-get install -y -q --no-install-recommends \
      libabsl20220623 libc-ares2 libcivetweb1 libgrpc++1.51 libgrpc29 libprometheus-cpp-core1.0 \
      libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 libssl3 libstdc++6 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home spattn
COPY --from=build /out/ /
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["/usr/local/bin/spattnctl", "--address=127.0.0.1:50051", "--timeout_s=4", "health"]
ENTRYPOINT ["/usr/local/bin/spattn-worker"]
# Kubernetes passes --config=/etc/spattn/worker.conf (deploy/k8s/base/worker/worker.conf).
CMD ["--listen=0.0.0.0:50051", "--metrics=0.0.0.0:9464"]
