//! The `logstamp` command: parses the command line and hands over to `cli`.

mod cli;

/// jemalloc: a worker allocates each message's bytes on the consumer thread and frees them on
/// the writers' threads, which glibc's malloc serves with more CPU and, by its per-thread
/// arenas, more memory (measured side by side in docs/benchmarks.md, "The allocator and the
/// fetch back-off").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read at its start: two arenas rather than four per CPU, which held less
/// memory at no CPU cost in the same measurements. `_RJEM_MALLOC_CONF` in the environment
/// overrides it.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 10] = b"narenas:2\0";

fn main() -> std::process::ExitCode {
    cli::main()
}
