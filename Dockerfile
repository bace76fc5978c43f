# logstamp in a container: built with the Rust toolchain, run on a slim Debian with only the
# libraries the binary links. `docker compose up --build` uses it (see docker-compose.yml).

# Build stage: the toolchain and what the bundled librdkafka (with TLS) builds with.
FROM rust:1-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src

# Dependencies first, against stub sources: a change to the code does not rebuild them.
# The manifest names benches/id.rs, so it needs a stub too.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && echo 'fn main() {}' > benches/id.rs \
    && cargo build --release --locked \
    && rm -rf src benches

COPY . .
# The copied sources may be older than the stub build: make them newer so cargo rebuilds them.
RUN touch src/lib.rs src/main.rs \
    && cargo build --release --locked --bin logstamp \
    && cp target/release/logstamp /usr/local/bin/logstamp

# Runtime stage: OpenSSL and zlib are linked dynamically (librdkafka with TLS); CA certificates
# for SASL_SSL clusters. The default settings are built into the binary.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin logstamp
COPY --from=build /usr/local/bin/logstamp /usr/local/bin/logstamp
# Numeric, so a runtime that refuses root (runAsNonRoot) can tell.
USER 10001:10001
ENTRYPOINT ["logstamp"]
CMD ["--help"]
