//! `docker-compose.yml` and the `Dockerfile` checked against the code, without a Docker engine:
//! the files are parsed, and every logstamp service's settings are loaded by the same loader the
//! binary uses, then compared with the other services of the file (database servers, Kafka and
//! its listeners, topics, published ports, start order).

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde_yaml::{Mapping, Value};

use logstamp::config::{ConfigError, Settings, Sources};
use logstamp::id::settings::ServiceIdSetting;
use logstamp::relay::capture::check_source;

// ---------------------------------------------------------------------------------------------
// Reading the compose file
// ---------------------------------------------------------------------------------------------

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The services of `docker-compose.yml`, by name, with YAML merge keys applied.
fn services() -> BTreeMap<String, Mapping> {
    let path = repo().join("docker-compose.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut doc: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    doc.apply_merge().expect("merge keys");
    assert!(
        doc.get("version").is_none(),
        "the compose specification has no `version:` key"
    );
    let services = doc
        .get("services")
        .and_then(Value::as_mapping)
        .expect("docker-compose.yml has no services");
    services
        .iter()
        .map(|(name, service)| {
            let name = scalar(name);
            let service = service
                .as_mapping()
                .unwrap_or_else(|| panic!("service {name} is not a mapping"))
                .clone();
            (name, service)
        })
        .collect()
}

/// A YAML scalar as the text compose would pass on (numbers and booleans included).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn field<'a>(service: &'a Mapping, key: &str) -> Option<&'a Value> {
    service.get(Value::from(key))
}

/// `command` or `entrypoint` as a list of words (a string form is split at whitespace).
fn words(service: &Mapping, key: &str) -> Vec<String> {
    match field(service, key) {
        None => Vec::new(),
        Some(Value::Sequence(items)) => items.iter().map(scalar).collect(),
        Some(other) => scalar(other)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    }
}

/// `command` or `entrypoint` as the text a shell would get: a list's items joined by spaces.
fn raw_text(service: &Mapping, key: &str) -> String {
    match field(service, key) {
        None => String::new(),
        Some(Value::Sequence(items)) => items.iter().map(scalar).collect::<Vec<_>>().join(" "),
        Some(other) => scalar(other),
    }
}

/// `environment`, in its mapping or its `KEY=value` list form.
fn environment(service: &Mapping) -> HashMap<String, String> {
    match field(service, "environment") {
        None => HashMap::new(),
        Some(Value::Mapping(vars)) => vars.iter().map(|(k, v)| (scalar(k), scalar(v))).collect(),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| {
                let item = scalar(item);
                let (k, v) = item.split_once('=').unwrap_or((item.as_str(), ""));
                (k.to_string(), v.to_string())
            })
            .collect(),
        Some(other) => panic!("environment is neither a mapping nor a list: {other:?}"),
    }
}

fn logstamp_vars(service: &Mapping) -> HashMap<String, String> {
    environment(service)
        .into_iter()
        .filter(|(k, _)| k.starts_with("LOGSTAMP__"))
        .collect()
}

/// `depends_on` as service -> condition (the list form means `service_started`).
fn depends_on(service: &Mapping) -> BTreeMap<String, String> {
    match field(service, "depends_on") {
        None => BTreeMap::new(),
        Some(Value::Sequence(names)) => names
            .iter()
            .map(|n| (scalar(n), "service_started".to_string()))
            .collect(),
        Some(Value::Mapping(deps)) => deps
            .iter()
            .map(|(name, dep)| {
                let condition = dep
                    .get("condition")
                    .map(scalar)
                    .unwrap_or_else(|| "service_started".into());
                (scalar(name), condition)
            })
            .collect(),
        Some(other) => panic!("depends_on is neither a mapping nor a list: {other:?}"),
    }
}

/// A published port: the host side (if published on a fixed one) and the container side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Port {
    host: Option<u16>,
    container: u16,
}

/// `ports`, short (`[ip:][host:]container[/proto]`) or long (`target`, `published`) syntax.
fn ports(service: &Mapping) -> Vec<Port> {
    let number = |text: &str| -> u16 {
        text.parse()
            .unwrap_or_else(|_| panic!("port {text:?} is not a single number"))
    };
    let Some(Value::Sequence(items)) = field(service, "ports") else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| match item {
            Value::Mapping(long) => Port {
                host: long.get("published").map(|p| number(&scalar(p))),
                container: number(&scalar(long.get("target").expect("ports: no target"))),
            },
            short => {
                let text = scalar(short);
                let text = text.split('/').next().unwrap_or_default();
                let parts: Vec<&str> = text.rsplitn(3, ':').collect();
                Port {
                    container: number(parts[0]),
                    host: parts.get(1).map(|p| number(p)),
                }
            }
        })
        .collect()
}

/// The host file mounted at `target` in the container, relative to the compose file.
fn mounted_file(service: &Mapping, target: &str) -> Option<PathBuf> {
    let Some(Value::Sequence(volumes)) = field(service, "volumes") else {
        return None;
    };
    volumes.iter().find_map(|volume| {
        let (source, dest) = match volume {
            Value::Mapping(long) => (scalar(long.get("source")?), scalar(long.get("target")?)),
            short => {
                let text = scalar(short);
                let mut parts = text.split(':');
                (parts.next()?.to_string(), parts.next()?.to_string())
            }
        };
        (dest == target).then(|| repo().join(source.trim_start_matches("./")))
    })
}

/// A `--name=value` option list (a server's command line) as variables: `-` and `_` alike.
fn options(args: &[String]) -> BTreeMap<String, Option<String>> {
    args.iter()
        .filter_map(|arg| arg.strip_prefix("--"))
        .map(|option| match option.split_once('=') {
            Some((name, value)) => (name.replace('-', "_"), Some(value.to_string())),
            None => (option.replace('-', "_"), None),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The services, by kind
// ---------------------------------------------------------------------------------------------

/// A service that runs the logstamp image, with the settings it starts with.
struct Logstamp {
    name: String,
    /// The subcommand: `migrate`, `ingest`, `relay run`, ...
    command: String,
    settings: Settings,
}

/// Services that build the image of the `Dockerfile`, or run the image such a service builds.
fn is_logstamp(services: &BTreeMap<String, Mapping>, service: &Mapping) -> bool {
    let built: BTreeSet<String> = services
        .values()
        .filter(|s| field(s, "build").is_some())
        .filter_map(|s| field(s, "image").map(scalar))
        .collect();
    field(service, "build").is_some()
        || field(service, "image").is_some_and(|i| built.contains(&scalar(i)))
}

/// What the binary would load for this service: the `--config` file it mounts, its
/// environment, and the flags of its command line that set settings.
fn sources(name: &str, service: &Mapping) -> Sources {
    let args = words(service, "command");
    let flag = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|at| match args.get(at + 1) {
                Some(value) => value.clone(),
                None => panic!("{name}: {flag} without a value"),
            })
    };
    let file = flag("--config").map(|target| {
        mounted_file(service, &target)
            .unwrap_or_else(|| panic!("{name}: --config {target} is not a file it mounts"))
    });
    let overrides = flag("--service-id")
        .map(|id| vec![("id.service_id".to_string(), id)])
        .unwrap_or_default();
    Sources {
        file,
        env: Some(logstamp_vars(service)),
        overrides,
    }
}

/// The subcommand words of a logstamp command line, without its options and their values.
fn subcommand(args: &[String]) -> String {
    let mut words = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--config" || arg == "--service-id" {
            args.next();
        } else if !arg.starts_with('-') {
            words.push(arg.as_str());
        }
    }
    words.join(" ")
}

fn load(name: &str, service: &Mapping) -> Result<Settings, ConfigError> {
    Settings::load(&sources(name, service))
}

fn logstamp_services() -> Vec<Logstamp> {
    let services = services();
    let found: Vec<Logstamp> = services
        .iter()
        .filter(|(_, s)| is_logstamp(&services, s))
        .map(|(name, service)| Logstamp {
            name: name.clone(),
            command: subcommand(&words(service, "command")),
            settings: load(name, service).unwrap_or_else(|e| panic!("service {name}: {e}")),
        })
        .collect();
    assert!(!found.is_empty(), "no service runs logstamp");
    found
}

fn running<'a>(all: &'a [Logstamp], command: &str) -> Vec<&'a Logstamp> {
    let found: Vec<&Logstamp> = all.iter().filter(|s| s.command == command).collect();
    assert!(!found.is_empty(), "no service runs `logstamp {command}`");
    found
}

/// Database servers: the services of a MariaDB or MySQL image.
fn database_servers(services: &BTreeMap<String, Mapping>) -> BTreeMap<String, Mapping> {
    let found: BTreeMap<String, Mapping> = services
        .iter()
        .filter(|(_, s)| {
            field(s, "image")
                .map(scalar)
                .is_some_and(|i| i.starts_with("mariadb:") || i.starts_with("mysql:"))
        })
        .map(|(n, s)| (n.clone(), s.clone()))
        .collect();
    assert!(!found.is_empty(), "no database server");
    found
}

/// The port a database server listens on in its network.
fn server_port(server: &Mapping) -> u16 {
    match options(&words(server, "command")).get("port") {
        Some(Some(port)) => port.parse().expect("--port is a number"),
        _ => 3306,
    }
}

/// The Kafka service (the one advertising listeners) and the `host:port` addresses other
/// containers reach it at: its advertised listeners whose host is its service name.
fn kafka(services: &BTreeMap<String, Mapping>) -> (String, BTreeSet<String>) {
    let (name, service) = services
        .iter()
        .find(|(_, s)| environment(s).contains_key("KAFKA_ADVERTISED_LISTENERS"))
        .expect("no Kafka service (KAFKA_ADVERTISED_LISTENERS)");
    let internal = advertised(service)
        .into_values()
        .filter(|address| address.split(':').next() == Some(name.as_str()))
        .collect::<BTreeSet<_>>();
    assert!(
        !internal.is_empty(),
        "Kafka advertises no listener at its service name {name}"
    );
    (name.clone(), internal)
}

/// `NAME://host:port` lists of a Kafka environment variable, as name -> `host:port`.
fn listeners(list: &str) -> BTreeMap<String, String> {
    list.split(',')
        .filter_map(|entry| entry.trim().split_once("://"))
        .map(|(name, address)| (name.to_string(), address.to_string()))
        .collect()
}

fn advertised(service: &Mapping) -> BTreeMap<String, String> {
    listeners(&environment(service)["KAFKA_ADVERTISED_LISTENERS"])
}

fn host_and_port(address: &str) -> (String, u16) {
    let (host, port) = address
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{address:?} is not host:port"));
    let port = port
        .parse()
        .unwrap_or_else(|_| panic!("{address:?}: the port is not a number"));
    (host.to_string(), port)
}

fn mysql_url(settings: &Settings) -> url::Url {
    url::Url::parse(settings.mysql.url.expose()).expect("mysql.url was validated")
}

/// Topics created by the services' `kafka-topics.sh --create` commands, with their partitions.
fn created_topics(services: &BTreeMap<String, Mapping>) -> (Vec<String>, BTreeMap<String, u32>) {
    let (_, internal) = kafka(services);
    let mut creators = Vec::new();
    let mut topics = BTreeMap::new();
    for (name, service) in services {
        let script = ["entrypoint", "command"]
            .iter()
            .map(|key| raw_text(service, key))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("\\\n", " ");
        if !script.contains("kafka-topics.sh") {
            continue;
        }
        creators.push(name.clone());
        // Each invocation runs to the end of its line or shell command.
        for invocation in script.split("kafka-topics.sh").skip(1) {
            let line = invocation
                .split(['\n', ';', '&', '|'])
                .next()
                .unwrap_or_default();
            let tokens: Vec<&str> = line.split_whitespace().collect();
            if !tokens.contains(&"--create") {
                continue;
            }
            let value = |flag: &str| {
                let at = tokens
                    .iter()
                    .position(|t| *t == flag)
                    .unwrap_or_else(|| panic!("{name}: `{line}` has no {flag}"));
                tokens
                    .get(at + 1)
                    .unwrap_or_else(|| panic!("{name}: {flag} without a value"))
                    .to_string()
            };
            let bootstrap = value("--bootstrap-server");
            assert!(
                internal.contains(&bootstrap),
                "{name}: creates topics at {bootstrap}, not Kafka's internal listener {internal:?}"
            );
            let partitions = value("--partitions")
                .parse()
                .unwrap_or_else(|_| panic!("{name}: --partitions is not a number in `{line}`"));
            topics.insert(value("--topic"), partitions);
        }
    }
    assert!(!creators.is_empty(), "no service creates topics");
    (creators, topics)
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

#[test]
fn every_logstamp_variable_is_a_setting_the_loader_takes() {
    let services = services();
    for (name, service) in &services {
        let vars = logstamp_vars(service);
        if !is_logstamp(&services, service) {
            assert!(
                vars.is_empty(),
                "{name} does not run logstamp but sets {vars:?}"
            );
            continue;
        }
        // The loader skips empty variables, so an empty one would go unchecked.
        for (var, value) in &vars {
            assert!(!value.trim().is_empty(), "{name}: {var} is empty");
        }
        load(name, service).unwrap_or_else(|e| panic!("service {name}: {e}"));

        // The loader refuses what it does not know, so the load above means every variable
        // is a real setting: the same environment with one misspelt name is refused.
        for typo in [
            "LOGSTAMP__KAFKA__BROKER",
            "LOGSTAMP__TELEMETRY__LISTEN_ADDRESS",
        ] {
            let mut wrong = sources(name, service);
            wrong
                .env
                .get_or_insert_with(HashMap::new)
                .insert(typo.to_string(), "x".to_string());
            match Settings::load(&wrong) {
                Ok(_) => panic!("{name}: the loader accepted the unknown variable {typo}"),
                Err(e) => assert!(e.to_string().contains(typo), "{name}: {typo}: {e}"),
            }
        }
    }
}

#[test]
fn config_files_exist_and_relays_apply_each_other() {
    let services = services();
    let mut mounted = 0;
    for (name, service) in &services {
        let Some(file) = sources(name, service).file else {
            continue;
        };
        mounted += 1;
        assert!(
            file.is_file(),
            "{name} mounts {file:?} as its --config, which is not in the repository"
        );
        assert!(
            file.starts_with(repo()),
            "{name}: {file:?} is outside the repository"
        );
        // Loaded with the service's environment on top, as the binary would.
        load(name, service).unwrap_or_else(|e| panic!("service {name}: {e}"));
    }
    assert!(mounted > 0, "no service passes a --config file");

    let all = logstamp_services();
    let relays = running(&all, "relay run");
    let dcs: BTreeSet<&str> = relays
        .iter()
        .map(|r| r.settings.relay.dc.as_str())
        .collect();
    assert_eq!(dcs.len(), relays.len(), "two relays share a relay.dc");
    assert!(dcs.len() >= 2, "a relay needs another data centre");
    for relay in &relays {
        let own = relay.settings.relay.dc.as_str();
        let remotes: BTreeSet<&str> = relay
            .settings
            .relay
            .remotes
            .iter()
            .map(|r| r.dc.as_str())
            .collect();
        let others: BTreeSet<&str> = dcs.iter().copied().filter(|dc| *dc != own).collect();
        assert_eq!(
            remotes, others,
            "{}: relay.remotes must name the other data centres",
            relay.name
        );
        assert!(
            !relay.settings.relay.tables.is_empty(),
            "{}: relay.tables is empty, nothing would be relayed",
            relay.name
        );
    }
}

#[test]
fn ingest_workers_have_distinct_service_ids_within_the_service_bits() {
    let all = logstamp_services();
    let workers = running(&all, "ingest");
    let mut seen = BTreeMap::new();
    for worker in workers {
        let id = match worker.settings.id.service_id {
            ServiceIdSetting::Fixed(id) => id,
            // Leased IDs are distinct by construction.
            ServiceIdSetting::Auto => continue,
        };
        let layout = worker.settings.id.layout;
        assert!(
            id <= layout.max_service_id(),
            "{}: service ID {id} does not fit {} service bits",
            worker.name,
            layout.service_bits()
        );
        if let Some(other) = seen.insert(id, worker.name.clone()) {
            panic!(
                "{} and {other} both have service ID {id}: the second would refuse to start",
                worker.name
            );
        }
    }
}

#[test]
fn connections_point_at_the_services_of_the_file() {
    let services = services();
    let servers = database_servers(&services);
    let (kafka_name, internal) = kafka(&services);
    for service in logstamp_services() {
        let name = &service.name;
        let settings = &service.settings;

        let url = mysql_url(settings);
        let host = url.host_str().unwrap_or_default();
        let server = servers.get(host).unwrap_or_else(|| {
            panic!(
                "{name}: mysql.url names host {host}, which is not one of the database servers {:?}",
                servers.keys()
            )
        });
        let port = url.port().unwrap_or(3306);
        assert_eq!(
            port,
            server_port(server),
            "{name}: mysql.url port differs from the port {host} listens on"
        );
        if url.username() == "root" {
            let env = environment(server);
            let password = env
                .get("MARIADB_ROOT_PASSWORD")
                .or_else(|| env.get("MYSQL_ROOT_PASSWORD"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                url.password().unwrap_or_default(),
                password,
                "{name}: mysql.url's root password is not {host}'s"
            );
        }

        if service.command != "migrate" {
            for broker in settings.kafka.brokers.split(',').map(str::trim) {
                assert!(
                    internal.contains(broker),
                    "{name}: kafka.brokers has {broker}, not {kafka_name}'s internal listener {internal:?}"
                );
            }
            for remote in &settings.relay.remotes {
                for broker in remote.brokers.split(',').map(str::trim) {
                    assert!(
                        broker.is_empty() || internal.contains(broker),
                        "{name}: relay.remotes {} has brokers {broker}, not {internal:?}",
                        remote.dc
                    );
                }
            }
        }
    }

    // Metrics and health: each worker listens on every interface of its container, on the
    // container side of a published port.
    for worker in running(&logstamp_services(), "ingest") {
        let listen = worker.settings.telemetry.listen;
        assert!(
            listen.ip.is_unspecified() && !listen.is_range(),
            "{}: telemetry.listen {listen} is not one port on every interface of its container",
            worker.name
        );
        let published = ports(&services[&worker.name]);
        assert!(
            published.iter().any(|p| p.container == listen.first_port),
            "{}: telemetry.listen port {} is not published ({published:?})",
            worker.name,
            listen.first_port
        );
    }

    // Kafka's listener for the host: advertised as localhost:PORT, published as PORT:PORT.
    let kafka_service = &services[&kafka_name];
    let bound = listeners(&environment(kafka_service)["KAFKA_LISTENERS"]);
    for (listener, address) in advertised(kafka_service) {
        let (host, port) = host_and_port(&address);
        if host != "localhost" && host != "127.0.0.1" {
            continue;
        }
        let (_, container) = host_and_port(&bound[&listener]);
        assert!(
            ports(kafka_service).contains(&Port {
                host: Some(port),
                container
            }),
            "{kafka_name}: listener {listener} is advertised as {address} but container port \
             {container} is not published on host port {port}"
        );
    }

    // Host ports are distinct across the file.
    let mut taken = BTreeMap::new();
    for (name, service) in &services {
        for port in ports(service) {
            if let Some(host) = port.host
                && let Some(other) = taken.insert(host, name.clone())
            {
                panic!("{name} and {other} both publish host port {host}");
            }
        }
    }
}

/// The server variables the relay checks, as a server started with these options reports
/// them: MariaDB 10.11's defaults where an option is not given.
fn server_variables(server: &Mapping) -> HashMap<String, String> {
    let given = options(&words(server, "command"));
    let value = |name: &str, default: &str| match given.get(name) {
        Some(Some(v)) => v.to_ascii_uppercase(),
        Some(None) => "ON".to_string(),
        None => default.to_string(),
    };
    let log_bin = if given.contains_key("log_bin") && !given.contains_key("skip_log_bin") {
        "ON"
    } else {
        "OFF"
    };
    HashMap::from([
        ("log_bin".to_string(), log_bin.to_string()),
        ("binlog_format".into(), value("binlog_format", "MIXED")),
        ("binlog_row_image".into(), value("binlog_row_image", "FULL")),
        (
            "binlog_row_metadata".into(),
            value("binlog_row_metadata", "NO_LOG"),
        ),
        ("binlog_checksum".into(), value("binlog_checksum", "CRC32")),
        ("log_bin_compress".into(), value("log_bin_compress", "OFF")),
        ("server_id".into(), value("server_id", "1")),
    ])
}

#[test]
fn database_servers_have_the_binlog_the_relays_need() {
    let services = services();
    let servers = database_servers(&services);

    // Without options a server is refused: the check below is not vacuous.
    assert!(
        check_source(&server_variables(&Mapping::new()), 4001).is_err(),
        "the relay accepts a server with default settings"
    );

    let mut server_ids = BTreeMap::new();
    for (name, server) in &servers {
        let id = server_variables(server)["server_id"].clone();
        assert!(
            options(&words(server, "command")).contains_key("server_id"),
            "{name}: no --server-id"
        );
        if let Some(other) = server_ids.insert(id.clone(), name.clone()) {
            panic!("{name} and {other} both have server_id {id}");
        }
    }

    let all = logstamp_services();
    let mut relay_ids = BTreeMap::new();
    for relay in running(&all, "relay run") {
        let id = relay.settings.relay.server_id;
        assert_ne!(id, 0, "{}: relay.server_id is not set", relay.name);
        if let Some(server) = server_ids.get(&id.to_string()) {
            panic!(
                "{}: relay.server_id {id} is {server}'s server_id",
                relay.name
            );
        }
        if let Some(other) = relay_ids.insert(id, relay.name.clone()) {
            panic!("{} and {other} both have relay.server_id {id}", relay.name);
        }
        // The relay's own start-up check, on the server it captures from.
        let url = mysql_url(&relay.settings);
        let host = url.host_str().unwrap_or_default();
        check_source(&server_variables(&servers[host]), id)
            .unwrap_or_else(|e| panic!("{}: {host}: {e}", relay.name));
    }
}

#[test]
fn topics_are_created_as_the_services_use_them() {
    let services = services();
    let (_, topics) = created_topics(&services);
    let all = logstamp_services();
    for worker in running(&all, "ingest") {
        for topic in &worker.settings.kafka.topics {
            assert!(
                topics.get(topic).is_some_and(|p| *p >= 1),
                "{}: consumes {topic}, which is not created ({topics:?})",
                worker.name
            );
        }
    }
    for relay in running(&all, "relay run") {
        let relay_settings = &relay.settings.relay;
        let dcs = std::iter::once(relay_settings.dc.as_str())
            .chain(relay_settings.remotes.iter().map(|r| r.dc.as_str()));
        for dc in dcs {
            let topic = relay_settings.topic(dc, None);
            assert_eq!(
                topics.get(&topic),
                Some(&1),
                "{}: the relay topic {topic} must be created with exactly one partition",
                relay.name
            );
        }
    }
}

/// Users run the Kafka the tests run: every Apache Kafka image of the file is the version
/// pinned in tests/kafka/pom.xml.
#[test]
fn kafka_is_the_version_the_tests_run() {
    let images: BTreeSet<String> = services()
        .values()
        .filter_map(|s| field(s, "image").map(scalar))
        .filter(|image| image.starts_with("apache/kafka:"))
        .collect();
    let tested = format!("apache/kafka:{}", support::kafka::version());
    assert_eq!(images, BTreeSet::from([tested]));
}

#[test]
fn services_start_in_order() {
    let services = services();
    let servers = database_servers(&services);
    let (kafka_name, _) = kafka(&services);
    let (creators, _) = created_topics(&services);

    for (name, service) in &services {
        for target in depends_on(service).keys() {
            assert!(
                services.contains_key(target),
                "{name} depends on {target}, which is not a service"
            );
        }
    }
    let waits_for = |name: &str, target: &str, condition: &str| {
        let found = depends_on(&services[name]).get(target).cloned();
        assert_eq!(
            found.as_deref(),
            Some(condition),
            "{name} must depend on {target} with condition {condition}"
        );
        if condition == "service_healthy" {
            assert!(
                field(&services[target], "healthcheck").is_some(),
                "{name} waits for {target} to be healthy, which has no healthcheck"
            );
        }
    };

    let all = logstamp_services();
    let migrations = running(&all, "migrate");
    for migrate in &migrations {
        let url = mysql_url(&migrate.settings);
        waits_for(
            &migrate.name,
            url.host_str().unwrap_or_default(),
            "service_healthy",
        );
    }
    for service in all.iter().filter(|s| s.command != "migrate") {
        // The database it uses is migrated first.
        let url = mysql_url(&service.settings);
        let migrate = migrations
            .iter()
            .find(|m| {
                let other = mysql_url(&m.settings);
                (other.host_str(), other.port(), other.path())
                    == (url.host_str(), url.port(), url.path())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{}: nothing migrates {}",
                    service.name,
                    url.host_str().unwrap_or_default()
                )
            });
        waits_for(
            &service.name,
            &migrate.name,
            "service_completed_successfully",
        );
        // Its topics exist first.
        assert!(
            creators.iter().any(|c| depends_on(&services[&service.name])
                .get(c)
                .is_some_and(|cond| cond == "service_completed_successfully")),
            "{} must wait for the topics ({creators:?}) with service_completed_successfully",
            service.name
        );
    }
    for creator in &creators {
        waits_for(creator, &kafka_name, "service_healthy");
    }
    for server in servers.keys() {
        assert!(
            field(&services[server], "healthcheck").is_some(),
            "{server} has no healthcheck"
        );
    }
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn dockerfile() -> Vec<(String, String)> {
    let path = repo().join("Dockerfile");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let (word, rest) = current.split_once(' ').unwrap_or((&current, ""));
                instructions.push((word.to_ascii_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    instructions
}

#[test]
fn the_image_is_multi_stage_runs_as_non_root_and_the_services_build_it() {
    let instructions = dockerfile();
    let stages = instructions.iter().filter(|(w, _)| w == "FROM").count();
    assert!(
        stages >= 2,
        "the Dockerfile has {stages} stage(s), not a build and a runtime stage"
    );
    let build = instructions
        .iter()
        .any(|(w, rest)| w == "RUN" && rest.contains("cargo build --release --locked"));
    assert!(
        build,
        "the Dockerfile does not run `cargo build --release --locked`"
    );

    let last_from = instructions
        .iter()
        .rposition(|(w, _)| w == "FROM")
        .unwrap_or(0);
    let runtime = &instructions[last_from..];
    let user = runtime
        .iter()
        .rev()
        .find(|(w, _)| w == "USER")
        .map(|(_, user)| user.split(':').next().unwrap_or_default().to_string())
        .expect("the runtime stage sets no USER: it would run as root");
    assert!(
        user != "root" && user != "0",
        "the runtime stage runs as {user}"
    );
    let entrypoint = runtime
        .iter()
        .find(|(w, _)| w == "ENTRYPOINT")
        .map(|(_, e)| e.clone())
        .unwrap_or_default();
    assert!(
        entrypoint.contains("logstamp"),
        "the runtime stage's ENTRYPOINT is not logstamp: {entrypoint:?}"
    );

    let ignored = std::fs::read_to_string(repo().join(".dockerignore")).unwrap_or_default();
    assert!(
        ignored
            .lines()
            .any(|l| l.trim().trim_end_matches('/') == "target"),
        ".dockerignore does not leave out target/"
    );

    let services = services();
    for (name, service) in services.iter().filter(|(_, s)| is_logstamp(&services, s)) {
        // Every logstamp service tags the same image, and those that build it build this file.
        let image = field(service, "image").map(scalar);
        assert!(image.is_some(), "{name} builds an image without a name");
        let Some(build) = field(service, "build") else {
            continue;
        };
        let (context, file) = match build {
            Value::Mapping(long) => (
                long.get("context")
                    .map(scalar)
                    .unwrap_or_else(|| ".".into()),
                long.get("dockerfile")
                    .map(scalar)
                    .unwrap_or_else(|| "Dockerfile".into()),
            ),
            short => (scalar(short), "Dockerfile".to_string()),
        };
        let path = repo().join(&context).join(&file);
        assert!(
            path.canonicalize().ok() == repo().join("Dockerfile").canonicalize().ok(),
            "{name} builds {context}/{file}, not the repository's Dockerfile"
        );
    }
    let images: BTreeSet<String> = services
        .values()
        .filter(|s| is_logstamp(&services, s))
        .filter_map(|s| field(s, "image").map(scalar))
        .collect();
    assert_eq!(
        images.len(),
        1,
        "logstamp services name several images: {images:?}"
    );
}
