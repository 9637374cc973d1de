//! `jobguard generate --output DIR`: writes the units the generator would write, for
//! inspection. Problems in the job list are printed as the generator logs them ("…;
//! skipping …") and do not change the exit status; a directory that cannot be written
//! does ([`crate::exit::FAILURE`]). Files already in the directory are replaced when the
//! generator would write them and left alone otherwise (a job removed from the list keeps
//! its old files there).

use crate::cli::GenerateArgs;
use crate::exit::{self, Error, Finished};
use crate::joblist::config::{self, ConfigSource};
use crate::systemd::generator::{self, Log};
use crate::systemd::render::RenderOptions;

/// Runs `jobguard generate`: ends with 0, or the generator's status when a unit cannot be
/// written ([`generator::generate_into`]).
///
/// # Errors
/// 1 when the directory cannot be created.
pub fn run(args: &GenerateArgs) -> exit::Result {
    std::fs::create_dir_all(&args.output).map_err(|e| {
        Error::new(
            crate::exit::FAILURE,
            format!("cannot create {}: {e}", args.output.display()),
        )
    })?;
    let set = config::load(&ConfigSource::resolve(args.config.config.clone()));
    let status = generator::generate_into(
        &set,
        &args.output,
        &RenderOptions::from_env(),
        &mut Log::Stderr("jobguard"),
    );
    if status == crate::exit::OK {
        println!(
            "wrote units for {} job{} to {}",
            set.jobs.len(),
            if set.jobs.len() == 1 { "" } else { "s" },
            args.output.display()
        );
    }
    Ok(Finished::with(status))
}
