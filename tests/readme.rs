//! The README stays true: its configuration reference lists every setting of
//! `config/default.toml` with its default, its worked example is the example file the pipeline
//! tests run, and every `logstamp` command it shows is run here (long-running ones are parsed
//! with `--help` here and run by their own tests: ingest, relay, demo, dev-broker, serve).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::TestDb;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

/// Every leaf of a TOML document as `section.key` and its value written as TOML; arrays of
/// tables (like `store.columns`) are one entry, their value not compared.
fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, Option<String>>) {
    for (key, value) in table {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) if !inner.is_empty() => flatten(&name, inner, out),
            toml::Value::Array(items) if items.iter().any(|i| i.is_table()) => {
                out.insert(name, None);
            }
            other => {
                out.insert(name, Some(other.to_string()));
            }
        }
    }
}

/// The rows `| `key` | `default` | meaning |` of the README's configuration reference.
fn reference_rows(readme: &str) -> BTreeMap<String, String> {
    let start = readme
        .find("## Configuration reference")
        .expect("the README has a Configuration reference section");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut rows = BTreeMap::new();
    for line in section[..end].lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let key = cells[1].trim_matches('`').to_string();
        let default = cells[2].trim_matches('`').to_string();
        assert!(
            rows.insert(key.clone(), default).is_none(),
            "{key} is listed twice"
        );
    }
    rows
}

#[test]
fn the_configuration_reference_lists_every_setting_with_its_default() {
    let defaults: toml::Table = std::fs::read_to_string(root().join("config/default.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let mut settings = BTreeMap::new();
    flatten("", &defaults, &mut settings);
    let documented = reference_rows(&readme());
    for (key, value) in &settings {
        let shown = documented
            .get(key)
            .unwrap_or_else(|| panic!("{key} (config/default.toml) is missing from the README"));
        if let Some(value) = value {
            assert_eq!(shown, value, "the README's default of {key}");
        }
    }
    for key in documented.keys() {
        let known = settings.contains_key(key)
            || settings
                .keys()
                .any(|s| key.starts_with(&format!("{s}.")) || key.starts_with(&format!("{s}[")));
        assert!(
            known,
            "{key} is in the README but not in config/default.toml"
        );
    }
}

#[test]
fn the_worked_example_is_the_example_file() {
    let example = std::fs::read_to_string(root().join("config/examples/pipeline.toml")).unwrap();
    assert!(
        readme().contains(example.trim()),
        "the README shows config/examples/pipeline.toml as it is"
    );
}

#[test]
fn every_example_settings_file_is_shown_as_it_is() {
    let readme = readme();
    let mut shown = 0;
    for entry in std::fs::read_dir(root().join("config/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                readme.contains(text.trim()),
                "the README shows {} as it is",
                path.display()
            );
            shown += 1;
        }
    }
    assert!(shown >= 1, "config/examples has no settings file");
}

/// A command as the README shows it: environment assignments, then the arguments after the
/// program name.
#[derive(Debug)]
struct Shown {
    line: String,
    env: Vec<(String, String)>,
    args: Vec<String>,
}

/// `logstamp ...` and `cargo run --release -- ...` lines of the README's shell blocks, with
/// continuation lines joined and comments dropped.
fn shown_commands(readme: &str) -> Vec<Shown> {
    let mut commands = Vec::new();
    let mut in_shell = false;
    let mut pending = String::new();
    for line in readme.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_shell = matches!(trimmed, "```sh" | "```bash" | "```console");
            continue;
        }
        if !in_shell || trimmed.starts_with('#') {
            continue;
        }
        pending.push_str(trimmed.trim_end_matches('\\'));
        pending.push(' ');
        if trimmed.ends_with('\\') {
            continue;
        }
        let text = std::mem::take(&mut pending);
        let text = text.split(" #").next().unwrap_or("").trim().to_string();
        let words = shlex::split(&text).unwrap_or_else(|| panic!("cannot split {text:?}"));
        let mut env = Vec::new();
        let mut rest = words.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            match first.split_once('=') {
                Some((name, value)) if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') => {
                    env.push((name.to_string(), value.to_string()));
                    rest = tail;
                }
                _ => break,
            }
        }
        let args = match rest {
            [program, args @ ..] if program == "logstamp" => args.to_vec(),
            [cargo, run, release, dashes, args @ ..]
                if cargo == "cargo" && run == "run" && release == "--release" && dashes == "--" =>
            {
                args.to_vec()
            }
            _ => continue,
        };
        commands.push(Shown {
            line: text,
            env,
            args,
        });
    }
    commands
}

/// Commands that run until stopped, or for minutes: their arguments are checked here with
/// `--help` (clap validates every flag and value before it); their own tests run them.
fn long_running(args: &[String]) -> bool {
    // The subcommand words: flags dropped, and the file named by the global `--config FILE`.
    let mut words = Vec::new();
    let mut rest = args.iter().map(String::as_str);
    while let Some(arg) = rest.next() {
        if arg == "--config" {
            rest.next();
        } else if !arg.starts_with('-') {
            words.push(arg);
        }
    }
    matches!(
        words.as_slice(),
        ["ingest", ..]
            | ["demo", ..]
            | ["dev-broker", ..]
            | ["bench", ..]
            | ["relay", "run" | "snapshot", ..]
            | ["serve", ..]
    ) || args.iter().any(|a| a == "--follow")
        || needs_a_binlog(&words)
        || needs_remote_dcs(&words)
}

/// `relay status` and `relay reset` read the server's binary log position, and the test
/// database's server has no binary log; `tests/relay.rs` runs them against servers that have one.
fn needs_a_binlog(words: &[&str]) -> bool {
    matches!(words, ["relay", "status" | "reset", ..])
}

/// `relay verify` compares with other data centres' databases; `tests/relay_verify.rs` runs it
/// against private servers with relays.
fn needs_remote_dcs(words: &[&str]) -> bool {
    matches!(words, ["relay", "verify", ..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_the_readme_shows_works() {
    let readme = readme();
    let commands = shown_commands(&readme);
    assert!(
        commands.len() >= 20,
        "found only {} commands",
        commands.len()
    );
    let db = TestDb::create("readme").await;
    let program = env!("CARGO_BIN_EXE_logstamp");
    for shown in &commands {
        let mut command = Command::new(program);
        command
            .current_dir(root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("LOGSTAMP__MYSQL__URL", &db.url)
            .env("LOGSTAMP__STORE__GIVE_UP_AFTER", "2s");
        for (name, value) in &shown.env {
            // The README's own database and broker addresses stand for the reader's.
            if name != "LOGSTAMP__MYSQL__URL" {
                command.env(name, value);
            }
        }
        let mut args = shown.args.clone();
        if long_running(&args) {
            args.push("--help".into());
        }
        let output = run(command.args(&args), Duration::from_secs(60));
        assert!(
            output.status.success(),
            "README command `{}` failed ({}), run as `logstamp {}`:\nstdout: {}\nstderr: {}",
            shown.line,
            output.status,
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The shard databases the shown commands made beside the test's own.
    let shards: std::collections::BTreeSet<String> = commands
        .iter()
        .flat_map(|c| &c.env)
        .filter(|(name, _)| name == "LOGSTAMP__STORE__SHARDS")
        .flat_map(|(_, urls)| urls.split(','))
        .filter_map(|url| url.rsplit('/').next().map(str::to_string))
        .collect();
    let mut conn = db.conn().await;
    for database in shards {
        mysql_async::prelude::Queryable::query_drop(
            &mut conn,
            format!("DROP DATABASE IF EXISTS `{database}`"),
        )
        .await
        .unwrap();
    }
}

fn run(command: &mut Command, within: Duration) -> std::process::Output {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let id = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        assert!(
            started.elapsed() < within,
            "a README command (pid {id}) ran past {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap().unwrap()
}

#[test]
fn the_readme_refers_only_to_files_that_exist() {
    for (i, _) in readme().match_indices("scripts/") {
        let path: String = readme()[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-'))
            .collect();
        assert!(root().join(&path).is_file(), "{path} does not exist");
    }
    for (i, _) in readme().match_indices("config/") {
        let text = &readme()[i..];
        let path: String = text
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
            .collect();
        let path = path.trim_end_matches('.');
        if path.ends_with(".toml") {
            assert!(
                Path::new(&root().join(path)).exists(),
                "{path} does not exist"
            );
        }
    }
}
