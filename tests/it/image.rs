//! The container image, built and started: deploy/Dockerfile's runtime stage built with buildah
//! around the binary under test (`BINARY_STAGE=prebuilt`), on a Debian bookworm base that stands
//! for distroless cc (`RUNTIME_BASE`: glibc, OpenSSL 3, CA certificates, the user 65532), then run
//! with `buildah run --isolation chroot`, which needs no daemon. The image's config says what the
//! Dockerfile says (user, entrypoint and command, exposed port); `ragwatch --version` inside is the
//! crate's version; the default command with the baked config serves /metrics, replays the bundled
//! sample traces, runs as 65532 and stops cleanly on SIGTERM.
//!
//! The base is bootstrapped with mmdebstrap (Debian's archive, about 40 s) and cached under
//! ~/.cache/ragwatch/image-base/, named after its recipe; buildah's storage is a temporary
//! directory of the test's own, removed at the end with every image and container in it.

use crate::common::dockerfile::{Dockerfile, Stage};
use crate::common::{Samples, http_get, run_ok, spawn_on_free_port, wait_for};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Debian release of distroless cc-debian12.
const SUITE: &str = "bookworm";

/// What distroless cc holds beyond the C library: OpenSSL 3 and the CA certificates (libgcc and
/// glibc come with Debian's essential set, which also brings a shell and dpkg that distroless
/// leaves out), and its `nonroot` user and group, 65532.
fn mmdebstrap_args() -> Vec<String> {
    [
        "--variant=essential",
        "--include=libssl3,ca-certificates",
        "--customize-hook=echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >> \"$1/etc/passwd\"",
        "--customize-hook=echo 'nonroot:x:65532:' >> \"$1/etc/group\"",
        "--customize-hook=install -d -o 65532 -g 65532 \"$1/home/nonroot\"",
        SUITE,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The base's cache name: the suite and a hash (FNV-1a) of the whole recipe, so a changed recipe
/// bootstraps a new base.
fn base_key() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in mmdebstrap_args().join("\0").bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{SUITE}-{hash:016x}")
}

/// The base's root filesystem as a tarball: from the cache, else bootstrapped into it. Returns the
/// tarball and whether it was bootstrapped now.
fn base_tarball() -> (PathBuf, bool) {
    let home = std::env::var("HOME").expect("HOME");
    let dir = Path::new(&home).join(".cache/ragwatch/image-base");
    std::fs::create_dir_all(&dir).unwrap();
    let tarball = dir.join(format!("{}.tar", base_key()));
    if tarball.is_file() {
        return (tarball, false);
    }
    let partial = dir.join(format!("{}.{}.tar", base_key(), std::process::id()));
    run_ok(
        Command::new("mmdebstrap")
            .args(["--quiet", "--format=tar"])
            .args(mmdebstrap_args())
            .arg(&partial),
    );
    std::fs::rename(&partial, &tarball).unwrap();
    (tarball, true)
}

/// buildah with a storage of its own (a temporary root and run root, the vfs driver: no mounts to
/// leave behind); its containers and images are removed on drop.
struct Buildah {
    dir: tempfile::TempDir,
}

impl Buildah {
    fn new() -> Buildah {
        Buildah {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("buildah");
        cmd.arg("--root")
            .arg(self.dir.path().join("root"))
            .arg("--runroot")
            .arg(self.dir.path().join("run"))
            .args(["--storage-driver", "vfs"]);
        cmd
    }

    /// Runs buildah with `args`, fails the test unless it succeeds; its stdout, trimmed.
    fn ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> String {
        let out = run_ok(self.command().args(args));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }
}

impl Drop for Buildah {
    fn drop(&mut self) {
        for args in [&["rm", "--all"][..], &["rmi", "--all", "--force"][..]] {
            let _ = self
                .command()
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A child process killed on drop, with the processes it started in the container.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|status| status.is_none()) {
            for (pid, _) in descendants(self.0.id()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The processes below `pid`, by the parent each one's /proc/PID/stat names: (pid, command name).
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parent_of: HashMap<u32, (u32, String)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let Some(ppid) = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
        else {
            continue;
        };
        parent_of.insert(p, (ppid, comm));
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (child, (ppid, comm)) in &parent_of {
            if *ppid == parent {
                out.push((*child, comm.clone()));
                frontier.push(*child);
            }
        }
    }
    out
}

/// The context the image is built from: what the repository's .dockerignore lets in, copied, with
/// the binary under test as target/release/ragwatch.
fn build_context() -> tempfile::TempDir {
    let context = tempfile::tempdir().unwrap();
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    std::fs::copy(
        root().join(".dockerignore"),
        context.path().join(".dockerignore"),
    )
    .unwrap();
    for allowed in ignore.lines().filter_map(|l| l.trim().strip_prefix('!')) {
        let from = root().join(allowed);
        if allowed == "target/release/ragwatch" || !from.exists() {
            continue;
        }
        let to = context.path().join(allowed);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        run_ok(Command::new("cp").arg("-a").arg(&from).arg(&to));
    }
    let binary = context.path().join("target/release/ragwatch");
    std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_ragwatch"), &binary).unwrap();
    context
}

/// The base, named as the build's RUNTIME_BASE: bootstrapped (or taken from the cache) and
/// imported. Its name, the tarball, whether it was bootstrapped, and the two times.
fn import_base(buildah: &Buildah) -> (String, PathBuf, bool, Duration, Duration) {
    let started = Instant::now();
    let (tarball, bootstrapped) = base_tarball();
    let base_time = started.elapsed();
    let started = Instant::now();
    let base = format!("localhost/ragwatch-test-base:{}", base_key());
    let container = buildah.ok(&["from", "scratch"]);
    buildah.ok(&["add", &container, tarball.to_str().unwrap(), "/"]);
    buildah.ok(&["commit", "--quiet", "--rm", &container, &base]);
    (base, tarball, bootstrapped, base_time, started.elapsed())
}

/// The Dockerfile's runtime stage built on the binary under test in `context`, on `base`.
fn build_image(buildah: &Buildah, base: &str, context: &Path) -> String {
    let image = format!("localhost/ragwatch:{}-test", env!("CARGO_PKG_VERSION"));
    let runtime_base = format!("RUNTIME_BASE={base}");
    buildah.ok(&[
        "bud",
        "--pull=never",
        "--isolation=chroot",
        "--build-arg",
        &runtime_base,
        "--build-arg",
        "BINARY_STAGE=prebuilt",
        "-f",
        root().join("deploy/Dockerfile").to_str().unwrap(),
        "-t",
        &image,
        context.to_str().unwrap(),
    ]);
    image
}

/// The image's config is what the Dockerfile's runtime stage says: user, entrypoint and command,
/// the exposed port, which is the one the baked config's admin listener binds.
fn assert_config_is_the_dockerfiles(buildah: &Buildah, image: &str, runtime: &Stage) {
    let inspect: Value =
        serde_json::from_str(&buildah.ok(&["inspect", "--type", "image", image])).unwrap();
    let config = &inspect["OCIv1"]["config"];
    let user = runtime.last("USER").unwrap();
    assert_eq!(config["User"], user, "{config}");
    assert_eq!(user.split(':').next(), Some("65532"));
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(runtime.exec_form("ENTRYPOINT")),
        "{config}"
    );
    assert_eq!(
        config["Cmd"],
        serde_json::json!(runtime.exec_form("CMD")),
        "{config}"
    );
    let expose = runtime.last("EXPOSE").unwrap();
    let ports: Vec<&String> = config["ExposedPorts"].as_object().unwrap().keys().collect();
    assert_eq!(ports, [&format!("{expose}/tcp")], "{config}");
    let baked = std::fs::read_to_string(root().join("deploy/image/ragwatch.toml")).unwrap();
    let baked: toml::Table = toml::from_str(&baked).unwrap();
    let listen = baked["http"]["listen"].as_str().unwrap();
    assert!(listen.ends_with(&format!(":{expose}")), "{listen}");
}

/// The default command, as the image's config names it, in `container`. chroot isolation shares
/// the host's network, so the admin listener moves to a free loopback port. Returns once it
/// replayed sample traces: the process and how many.
fn run_default_command(
    buildah: &Buildah,
    container: &str,
    command: &[String],
    log: &Path,
) -> (Running, f64) {
    let (port, child) = spawn_on_free_port(
        "ragwatch in the image",
        Duration::from_secs(60),
        |port| {
            buildah
                .command()
                .args(["run", "--isolation", "chroot", "--env"])
                .arg(format!("RAGWATCH__HTTP__LISTEN=127.0.0.1:{port}"))
                .arg(container)
                .arg("--")
                .args(command)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap()
        },
        |port| {
            http_get(SocketAddr::from(([127, 0, 0, 1], port)), "/metrics")
                .is_some_and(|(code, _)| code == 200)
        },
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let received = wait_for(
        "the sample traces to be replayed",
        Duration::from_secs(60),
        || {
            let (_, body) = http_get(addr, "/metrics")?;
            let n = Samples::parse(&body).sum("ragwatch_traces_received_total", &[]);
            (n > 0.0).then_some(n)
        },
    );
    (Running(child), received)
}

/// ragwatch itself runs as the image's user; SIGTERM to it ends the run cleanly, and buildah
/// passes its exit status on.
fn stop_as_the_images_user(running: &mut Running, log: &Path) {
    let (pid, _) = descendants(running.0.id())
        .into_iter()
        .find(|(_, comm)| comm == "ragwatch")
        .expect("ragwatch runs below buildah");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().nth(1),
        Some("65532"),
        "ragwatch runs as {uid}"
    );
    run_ok(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let exit = wait_for("ragwatch to stop", Duration::from_secs(30), || {
        running.0.try_wait().unwrap()
    });
    let log_text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(exit.success(), "{exit}: {log_text}");
}

#[test]
fn the_image_builds_on_the_binary_and_runs_its_default_command() {
    let dockerfile = Dockerfile::read(&root().join("deploy/Dockerfile"));
    let runtime = dockerfile.runtime();
    let buildah = Buildah::new();
    let (base, tarball, bootstrapped, base_time, import_time) = import_base(&buildah);
    let context = build_context();
    let started = Instant::now();
    let image = build_image(&buildah, &base, context.path());
    let build_time = started.elapsed();
    assert_config_is_the_dockerfiles(&buildah, &image, runtime);

    // The binary inside answers with the crate's version.
    let started = Instant::now();
    let container = buildah.ok(&["from", &image]);
    let entrypoint = runtime.exec_form("ENTRYPOINT");
    let version = buildah.ok(&[
        "run",
        "--isolation",
        "chroot",
        &container,
        "--",
        &entrypoint[0],
        "--version",
    ]);
    assert_eq!(
        version,
        format!("ragwatch {}", env!("CARGO_PKG_VERSION")),
        "ragwatch --version in the image"
    );
    let log = context.path().join("ragwatch.log");
    let command: Vec<String> = entrypoint
        .iter()
        .chain(&runtime.exec_form("CMD"))
        .cloned()
        .collect();
    let (mut running, received) = run_default_command(&buildah, &container, &command, &log);
    stop_as_the_images_user(&mut running, &log);
    let run_time = started.elapsed();

    eprintln!(
        "image: base {} in {:.1} s ({}), imported in {:.1} s; built in {:.1} s; \
         --version and the default command (ragwatch_traces_received_total {received}) to \
         SIGTERM in {:.1} s",
        if bootstrapped {
            "bootstrapped"
        } else {
            "from the cache"
        },
        base_time.as_secs_f64(),
        tarball.display(),
        import_time.as_secs_f64(),
        build_time.as_secs_f64(),
        run_time.as_secs_f64(),
    );
}
