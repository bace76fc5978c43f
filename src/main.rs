//! The `logstamp` command: parses the command line and hands over to `cli`.

mod cli;

/// A worker allocates and frees small buffers on several threads for every message (copies
/// off Kafka, mapped values, statement parameters): mimalloc's per-thread free lists cost a
/// fraction of the system allocator's locking there (docs/benchmarks.md, "Ingest efficiency").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
