//! Installing the plugin the way users will: krew (built from its Go module by `krew/krew-bin`)
//! adds our own index (a local git repository holding the manifest `krew/package` writes),
//! downloads the archive from a server on 127.0.0.1, checks its sha256, and links the binary;
//! then kubectl's plugin discovery runs `kubectl karpenter status` against the rig.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use karpenter_test_support::rig::{repo_root, rig};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn checked(command: &mut Command, what: &str) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Serves the files of `dir` over HTTP on 127.0.0.1 until the test ends; returns the base URL.
fn serve(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            // Drain the headers.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/')
                .to_owned();
            let mut stream = stream;
            let file = (!path.contains(".."))
                .then(|| std::fs::read(dir.join(&path)).ok())
                .flatten();
            let _ = match file {
                Some(body) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(&body)),
                None => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    url
}

fn git(dir: &Path, args: &[&str]) {
    checked(
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=test",
                "-c",
                "user.email=test@example.invalid",
            ])
            .args(args),
        &format!("git {}", args.join(" ")),
    );
}

#[test]
fn krew_installs_the_plugin_from_our_index_and_kubectl_runs_it() {
    let root = repo_root();
    let krew_out = checked(
        &mut Command::new(root.join("krew/krew-bin")),
        "building krew (krew/krew-bin)",
    );
    let krew = PathBuf::from(
        String::from_utf8_lossy(&krew_out.stdout)
            .lines()
            .last()
            .expect("krew path")
            .trim(),
    );

    let work = tempfile::tempdir().expect("temp dir");
    let dist = work.path().join("dist");
    let index = work.path().join("index");
    let url = serve(dist.clone());
    // Only this machine's platform is built here: without --partial the script refuses to write
    // a manifest missing the others, and it never writes a placeholder.
    let refused = Command::new(root.join("krew/package"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_kubectl-karpenter"),
            "--base-url",
            &url,
        ])
        .arg("--out")
        .arg(&dist)
        .arg("--manifest")
        .arg(index.join("plugins/karpenter.yaml"))
        .output()
        .expect("krew/package");
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.lines().last().is_some_and(
            |l| l.starts_with("krew/package: no archive in") && l.contains("--partial")
        ),
        "{said}"
    );
    assert!(
        !index.join("plugins/karpenter.yaml").exists(),
        "nothing written when refusing"
    );
    checked(
        Command::new(root.join("krew/package"))
            .args(["--manifest-only", "--partial", "--base-url", &url])
            .arg("--out")
            .arg(&dist)
            .arg("--manifest")
            .arg(index.join("plugins/karpenter.yaml")),
        "krew/package",
    );
    let manifest = std::fs::read_to_string(index.join("plugins/karpenter.yaml")).expect("manifest");
    let archives: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("dist")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(
        archives.len(),
        1,
        "one archive, for this machine: {archives:?}"
    );
    let archive = &archives[0];
    let sha = String::from_utf8_lossy(
        &checked(Command::new("sha256sum").arg(archive), "sha256sum").stdout,
    )
    .split_whitespace()
    .next()
    .expect("sha")
    .to_owned();
    let file = archive
        .file_name()
        .and_then(|f| f.to_str())
        .expect("file name");
    assert!(
        manifest.contains(&format!("uri: {url}/{file}\n    sha256: \"{sha}\"")),
        "the archive's uri and sha256:\n{manifest}"
    );
    assert_eq!(
        manifest.matches("- selector:").count(),
        1,
        "only platforms with an archive:\n{manifest}"
    );
    assert!(
        !manifest.contains("OWNER") && !manifest.contains(&"0".repeat(64)),
        "no placeholder:\n{manifest}"
    );
    git(&index, &["init", "-q"]);
    git(&index, &["add", "."]);
    git(&index, &["commit", "-q", "-m", "kubectl-karpenter index"]);

    let krew_root = work.path().join("krew-root");
    let path = format!(
        "{}:{}:{}",
        krew_root.join("bin").display(),
        rig().bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let krew_cmd = |args: &[&str]| {
        let mut c = Command::new(&krew);
        c.args(args)
            .env("KREW_ROOT", &krew_root)
            .env("KREW_NO_UPGRADE_CHECK", "1")
            .env("PATH", &path)
            .env("NO_PROXY", "127.0.0.1");
        c
    };
    checked(
        krew_cmd(&["index", "add", "kubectl-karpenter"]).arg(&index),
        "krew index add",
    );
    let installed = checked(
        &mut krew_cmd(&["install", "kubectl-karpenter/karpenter"]),
        "krew install",
    );
    let said = String::from_utf8_lossy(&installed.stderr);
    assert!(said.contains("Installed plugin: karpenter"), "{said}");

    let kubectl = |args: &[&str]| {
        let mut c = Command::new(rig().bin.join("kubectl"));
        c.args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", &rig().kubeconfig)
            .env("NO_COLOR", "1");
        c
    };
    let plugins = checked(&mut kubectl(&["plugin", "list"]), "kubectl plugin list");
    assert!(
        String::from_utf8_lossy(&plugins.stdout).contains(
            &krew_root
                .join("bin/kubectl-karpenter")
                .display()
                .to_string()
        )
    );
    let status = checked(
        &mut kubectl(&["karpenter", "status"]),
        "kubectl karpenter status",
    );
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.lines().any(|l| l.starts_with("TOTAL")), "{text}");
    let version = checked(
        &mut kubectl(&["karpenter", "version"]),
        "kubectl karpenter version",
    );
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("kubectl-karpenter {}", env!("CARGO_PKG_VERSION"))
    );
}
