//! A real PostgreSQL for differential tests: a throwaway cluster made by
//! `initdb` under a temp dir, started on a free port and stopped by PID
//! when dropped. The server binaries come from Debian's `postgresql`
//! package (`.ci/run` installs it); `WEIR_POSTGRES_BIN` names another
//! directory holding `initdb` and `postgres`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PostgresServer {
    child: Option<Child>,
    pub port: u16,
    _temp: tempfile::TempDir,
}

/// The directory with `initdb` and `postgres`: `WEIR_POSTGRES_BIN`, else
/// the newest `/usr/lib/postgresql/N/bin`.
fn binaries() -> PathBuf {
    if let Ok(directory) = std::env::var("WEIR_POSTGRES_BIN") {
        return PathBuf::from(directory);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed (apt-get install postgresql; .ci/run does)")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no /usr/lib/postgresql/N/bin/postgres")
        .1
}

/// PostgreSQL refuses to run as root; as root the cluster belongs to the
/// `postgres` user the Debian package creates.
fn server_user() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let line = passwd
        .lines()
        .find(|line| line.starts_with("postgres:"))
        .expect("running as root and there is no postgres user to run PostgreSQL as");
    let fields: Vec<&str> = line.split(':').collect();
    Some((fields[2].parse().unwrap(), fields[3].parse().unwrap()))
}

fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(program);
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command.env("LC_ALL", "C").env_remove("PGDATA");
    command
}

/// Waits up to 30 s for `pg_isready` to say the server accepts logins
/// while it runs; false when it exited (its port taken, say).
fn wait_ready(child: &mut Option<Child>, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let running = child.as_mut().expect("running");
        if running.try_wait().expect("poll postgres").is_some() {
            *child = None;
            return false;
        }
        let ready = Command::new("pg_isready")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
            .status()
            .is_ok_and(|status| status.success());
        if ready {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("PostgreSQL did not accept connections within 30 s");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

impl PostgresServer {
    /// Makes a cluster (UTF-8, C locale, UTC, trust authentication on
    /// loopback only) and starts it; returns once it accepts connections.
    pub fn start() -> PostgresServer {
        let bin = binaries();
        let user = server_user();
        let temp = tempfile::tempdir().expect("temp dir");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(temp.path(), Some(uid), Some(gid)).expect("chown temp dir");
        }
        let data = temp.path().join("data");
        let status = command(&bin.join("initdb"), user)
            .args(["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
            .args(["--username=postgres", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .status()
            .expect("run initdb");
        assert!(status.success(), "initdb failed: {status}");
        for _ in 0..5 {
            let port = free_port();
            let child = command(&bin.join("postgres"), user)
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string(), "-k"])
                .arg(temp.path())
                .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
                .args(["-c", "TimeZone=UTC", "-c", "DateStyle=ISO, MDY"])
                .args(["-c", "max_connections=20", "-c", "shared_buffers=32MB"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start postgres");
            let mut child = Some(child);
            if wait_ready(&mut child, port) {
                return PostgresServer {
                    child,
                    port,
                    _temp: temp,
                };
            }
            // The port was taken between choosing and binding: try another.
        }
        panic!("PostgreSQL did not start on any of 5 ports");
    }

    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(), tokio_postgres::NoTls)
                .await
                .expect("connect to PostgreSQL");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// A fast shutdown (SIGINT to the postmaster, by PID), then waits.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}
