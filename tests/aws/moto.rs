//! One moto server per test binary, started on first use on a free 127.0.0.1 port by
//! `tests/aws/moto serve PORT --owner-pid <this process>`: its watchdog stops the server as soon
//! as this test process is gone, however it ends, so no run leaves moto behind.
//!
//! Tests share the server and stay apart by naming everything after their own cluster.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(crate) struct Moto {
    pub url: String,
    /// moto's output, for when a test needs to know what it said.
    #[allow(dead_code)]
    pub log: PathBuf,
}

fn script() -> PathBuf {
    crate::rig::repo_root().join("tests/aws/moto")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// The moto server of this test binary.
pub(crate) fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| {
        if let Ok(url) = std::env::var("KARPENTER_TEST_MOTO_URL") {
            return Moto {
                url,
                log: PathBuf::new(),
            };
        }
        Moto::start()
    })
}

impl Moto {
    /// A moto server of its own, for a test that changes what the whole server does (IAM
    /// enforcement); stopped with this process like the shared one.
    pub(crate) fn start() -> Self {
        let install = Command::new(script())
            .arg("install")
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/aws/moto install");
        assert!(
            install.status.success(),
            "installing moto failed (tests/aws/moto install)"
        );
        let port = free_port();
        let log = std::env::temp_dir().join(format!("karpenter-moto-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("moto log file");
        // Never waited on: the server lives as long as this process, and its watchdog stops it.
        #[allow(clippy::zombie_processes)]
        Command::new(script())
            .args([
                "serve",
                &port.to_string(),
                "--owner-pid",
                &std::process::id().to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .expect("start moto");
        let start = Instant::now();
        while !answers(port) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "moto did not answer on port {port}; see {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Moto {
            url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// Turns moto's IAM access control on (every request is then authenticated and checked
    /// against the caller's IAM policies) or off, for the whole server (`/moto-api/reset-auth`).
    pub(crate) fn enforce_iam(&self, on: bool) {
        let address = self.url.trim_start_matches("http://");
        let body = if on { "0" } else { "inf" };
        let mut stream = TcpStream::connect(address).expect("connect to moto");
        write!(
            stream,
            "POST /moto-api/reset-auth HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send reset-auth");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.contains(" 200 "), "reset-auth: {answer}");
    }
}
