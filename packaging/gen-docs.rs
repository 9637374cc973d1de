//! Writes the generated half of the packages' documentation from the clap definitions in
//! `src/cli/mod.rs`: one man page per subcommand (`man1/jobguard-SUB.1`, clap_mangen) and
//! the shell completions for bash, zsh and fish: clap_complete's registration scripts,
//! which ask `jobguard` itself for the words (`JOBGUARD_COMPLETE=SHELL jobguard -- WORDS`), so that
//! job names are completed from the job list.
//!
//! Usage: `cargo run --example gen-docs -- OUT_DIR` (`scripts/package` runs it
//! with `target/dist`). The hand-written pages (jobguard(1), jobguard.toml(5),
//! jobguard-generator(8)) are in `packaging/man/`; the script copies and gzips both.
//! An example rather than a binary of the package, so clap_mangen stays a dev-dependency
//! and out of the shipped binaries.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::env::{Bash, EnvCompleter, Fish, Zsh};

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
    // Where bash-completion, zsh and fish look for them (Cargo.toml's package assets).
    let shells: [(&dyn EnvCompleter, &str); 3] = [
        (&Bash, "jobguard.bash"),
        (&Zsh, "_jobguard"),
        (&Fish, "jobguard.fish"),
    ];
    for (shell, file) in shells {
        let mut buf = Vec::new();
        shell
            .write_registration(
                jobguard::cli::COMPLETE_VAR,
                "jobguard",
                "jobguard",
                "jobguard",
                &mut buf,
            )
            .map_err(|e| format!("cannot write the {} completions: {e}", shell.name()))?;
        if shell.name() == "zsh" {
            // zsh autoloads `_jobguard` from its fpath at the first completion: the file's
            // body only defines the completer, so that first call completes too.
            buf.extend_from_slice(
                b"if [ \"$funcstack[1]\" = \"_jobguard\" ]; then\n    \
                  _clap_dynamic_completer_jobguard \"$@\"\nfi\n",
            );
        }
        let path = completions.join(file);
        std::fs::write(&path, buf).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
