//! `gcp-fake --port N [--project P]...`: serves the fake on 127.0.0.1 for manual use, with each
//! named project seeded (zones us-central1-a/b/c/f, common machine types, COS and Ubuntu images).

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut port = 8400u16;
    let mut projects = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => {
                port = args
                    .next()
                    .context("--port needs a value")?
                    .parse()
                    .context("--port")?
            }
            "--project" => projects.push(args.next().context("--project needs a value")?),
            "-h" | "--help" => {
                println!("usage: gcp-fake [--port 8400] [--project demo]...");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    if projects.is_empty() {
        projects.push("demo".to_owned());
    }
    let fake = gcp_fake::FakeGcp::start_on(([127, 0, 0, 1], port).into())
        .await
        .context("binding the port")?;
    for project in &projects {
        fake.state().compute.seed_project(project);
    }
    println!(
        "gcp-fake serving projects {} on {}",
        projects.join(", "),
        fake.endpoint()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    Ok(())
}
