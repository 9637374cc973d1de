//! `jobguard-generator NORMAL_DIR [EARLY_DIR LATE_DIR]`: the systemd generator
//! (systemd.generator(7)). Writes per-job drop-ins and `.wants/` links into NORMAL_DIR;
//! EARLY_DIR and LATE_DIR are not used. The job list is `/etc/jobguard` unless
//! `JOBGUARD_CONFIG` names another; `JOBGUARD_UNIT_DIR` replaces the templates' directory.

use std::path::PathBuf;
use std::process::ExitCode;

use jobguard::generator::{GeneratorArgs, IDENT, run};

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.len() != 1 && args.len() != 3 {
        eprintln!("usage: {IDENT} NORMAL_DIR [EARLY_DIR LATE_DIR]");
        return ExitCode::from(jobguard::exit::USAGE);
    }
    let generator_mode = args.len() == 3 || std::env::var_os("SYSTEMD_SCOPE").is_some();
    let status = run(&GeneratorArgs {
        normal_dir: args[0].clone(),
        generator_mode,
    });
    ExitCode::from(status)
}
