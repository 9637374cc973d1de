//! `jobguard-generator NORMAL_DIR [EARLY_DIR LATE_DIR]`: the systemd generator
//! (systemd.generator(7)). Writes per-job drop-ins and `.wants/` links into NORMAL_DIR;
//! EARLY_DIR and LATE_DIR are not used. The job list is `/etc/jobguard` unless
//! `JOBGUARD_CONFIG` names another; `JOBGUARD_UNIT_DIR` replaces the templates' directory.
//! `--help` and `--version` are answered; any other argument starting with `-` is a usage
//! error, never taken for a directory.

use std::path::PathBuf;
use std::process::ExitCode;

use jobguard::systemd::generator::{GeneratorArgs, IDENT, run};

const USAGE: &str = "usage: jobguard-generator NORMAL_DIR [EARLY_DIR LATE_DIR]";

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let dashed: Vec<&str> = args
        .iter()
        .filter_map(|a| a.to_str().filter(|s| s.starts_with('-')))
        .collect();
    match dashed.as_slice() {
        [] => {}
        ["--help" | "-h"] if args.len() == 1 => {
            println!(
                "{USAGE}\n\n\
                 The systemd generator of jobguard (systemd.generator(7)): reads the job list\n\
                 (/etc/jobguard/jobs.toml and jobs.d/*.toml, or JOBGUARD_CONFIG) and writes a\n\
                 timer and service drop-in per valid job into NORMAL_DIR. A bad job is a\n\
                 warning ending in \"skipping job NAME\"; the others are still written.\n\
                 systemd runs it at boot and on every daemon-reload; to see what it would\n\
                 write, run `jobguard generate --output DIR`. See jobguard-generator(8)."
            );
            return ExitCode::SUCCESS;
        }
        ["--version" | "-V"] if args.len() == 1 => {
            println!("{IDENT} {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        [first, ..] => {
            eprintln!("{IDENT}: unknown option {first}\n{USAGE}");
            return ExitCode::from(jobguard::exit::USAGE);
        }
    }
    if args.len() != 1 && args.len() != 3 {
        eprintln!("{USAGE}");
        return ExitCode::from(jobguard::exit::USAGE);
    }
    let generator_mode = args.len() == 3 || std::env::var_os("SYSTEMD_SCOPE").is_some();
    let status = run(&GeneratorArgs {
        normal_dir: args[0].clone(),
        generator_mode,
    });
    ExitCode::from(status)
}
