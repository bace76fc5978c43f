//! Python, for the tests that drive Kafka clients other than librdkafka: the virtual
//! environment `scripts/test` makes in the build directory (`target/test-python`) with
//! tests/requirements.txt installed, or the interpreter `LOGSTAMP_TEST_PYTHON` names.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::SET_UP;

/// The interpreter, checked to import `module`; a missing one fails the test, naming the fix.
pub fn python_with(module: &str) -> PathBuf {
    let python = std::env::var_os("LOGSTAMP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // CARGO_TARGET_TMPDIR is the build directory's tmp/.
            Path::new(env!("CARGO_TARGET_TMPDIR"))
                .with_file_name("test-python")
                .join("bin")
                .join("python3")
        });
    let imported = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output();
    match imported {
        Ok(output) if output.status.success() => python,
        other => panic!(
            "this test needs Python with {module} at {} (LOGSTAMP_TEST_PYTHON names another); \
             {SET_UP} (for this one alone: python3 -m venv target/test-python && \
             target/test-python/bin/pip install -r tests/requirements.txt). {}",
            python.display(),
            match other {
                Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
                Err(e) => e.to_string(),
            }
        ),
    }
}

/// Runs tests/python/`script` with `args` under `python`; its output, checked for success.
pub fn run(python: &Path, script: &str, args: &[&str]) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("python")
        .join(script);
    let output = Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", path.display()));
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
