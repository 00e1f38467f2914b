# syntax=docker/dockerfile:1.6
# spattn-index image (index service + spattnctl for backups and config imports). From the
# repository root:
#   docker build -f deploy/docker/index.Dockerfile -t spattn/index:0.1.0 .
# The index service needs no GPU: the build uses the CPU-only configuration.

ARG DEBIAN=debian:bookworm

FROM ${DEBIAN} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY deploy/setup.sh deploy/setup.sh
RUN apt-get update -q && ./deploy/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN ./deploy/setup.sh \
 && bazel build -c opt --config=nocuda //index:spattn-index //client:spattnctl \
 && install -D -m 0755 bazel-bin/index/spattn-index /out/usr/local/bin/spattn-index \
 && install -D -m 0755 bazel-bin/client/spattnctl /out/usr/local/bin/spattnctl \
 && bazel shutdown

FROM debian:bookworm-slim AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# Exactly the shared libraries of spattn-index and spattnctl (checked by
# deploy/docker/tests/test_docker.py against ldd of the Bazel-built binaries).
RUN apt-get update -q && apt-get install -y -q --no-install-recommends \
      libabsl20220623 libbz2-1.0 libc-ares2 libcivetweb1 libgflags2.2 libgrpc++1.51 libgrpc29 \
      liblz4-1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 \
      librocksdb7.8 libsnappy1v5 libssl3 libstdc++6 libzstd1 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home spattn \
 && install -d -o 10001 -g 10001 /var/lib/spattn-index /backups
COPY --from=build /out/ /
USER 10001
VOLUME ["/var/lib/spattn-index"]
EXPOSE 50061 9461
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/usr/local/bin/spattnctl", "index", "--server=127.0.0.1:50061", "--timeout=4", "health"]
ENTRYPOINT ["/usr/local/bin/spattn-index"]
CMD ["--data_dir=/var/lib/spattn-index/db", "--listen=0.0.0.0:50061", \
     "--metrics_listen=0.0.0.0:9461", "--backup_root=/backups"]
