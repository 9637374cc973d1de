//! Writes the generated half of the packages' documentation from the clap definitions in
//! `src/cli/mod.rs`: one man page per subcommand (`man1/jobguard-SUB.1`, clap_mangen) and
//! the shell completions for bash, zsh and fish (clap_complete).
//!
//! Usage: `cargo run --example gen-docs -- OUT_DIR` (`scripts/package` runs it
//! with `target/dist`). The hand-written pages (jobguard(1), jobguard.toml(5),
//! jobguard-generator(8)) are in `packaging/man/`; the script copies and gzips both.
//! An example rather than a binary of the package, so clap_mangen and clap_complete stay
//! dev-dependencies and out of the shipped binaries.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

fn main() -> ExitCode {
    let out = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("target/dist"), PathBuf::from);
    match generate(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-docs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(out: &Path) -> Result<(), String> {
    let man1 = out.join("man/man1");
    let completions = out.join("completions");
    for dir in [&man1, &completions] {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let mut cmd = jobguard::cli::Cli::command();
    cmd.build();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("jobguard-{}", sub.get_name());
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("jobguard {}", sub.get_name()));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.to_uppercase())
            .section("1")
            .source(format!("jobguard {}", env!("CARGO_PKG_VERSION")))
            .manual("jobguard manual")
            .render(&mut buf)
            .map_err(|e| format!("cannot render the page of {name}: {e}"))?;
        buf.extend_from_slice(b".SH \"SEE ALSO\"\n\\fBjobguard\\fR(1), \\fBjobguard.toml\\fR(5)\n");
        let path = man1.join(format!("{name}.1"));
        std::fs::write(&path, buf).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "jobguard", &completions)
            .map_err(|e| format!("cannot write the {shell} completions: {e}"))?;
    }
    Ok(())
}
