//! The file-system part alone of a generator's output, in three layouts, for
//! `benches/shim-and-generator.sh` (part 4): what the generator's own layout costs, and
//! what the two layouts with fewer files per job would save. Built there with `rustc -O`
//! (std only; not a cargo target: cargo does not look for targets below
//! `benches/support/`).
//!
//! `generator_layouts LAYOUT N DIR` writes, for jobs `job-0` … `job-(N-1)`, files of 420
//! bytes (about the size of a rendered drop-in) into the empty directory DIR:
//! - `dropins`: what jobguard-generator writes today: `jobguard@JOB.timer.d/` and
//!   `jobguard@JOB.service.d/`, each with one drop-in, and the link
//!   `timers.target.wants/jobguard@JOB.timer` (two directories, two files, one link);
//! - `units`: whole `jobguard@JOB.timer` and `jobguard@JOB.service` files (which systemd
//!   prefers to the templates, systemd.unit(5)), and one `timers.target.d/` drop-in that
//!   `Wants=` every timer (two files);
//! - `timers`: a whole `jobguard@JOB.timer` only, and the one `Wants=` drop-in (one file).

use std::fs::{DirBuilder, File};
use std::io::Write;
use std::path::Path;

fn file(path: &Path, body: &[u8]) {
    File::create(path)
        .and_then(|mut f| f.write_all(body))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn dir(path: &Path) {
    DirBuilder::new()
        .create(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, layout, n, out] = args.as_slice() else {
        panic!("usage: generator_layouts dropins|units|timers N DIR");
    };
    let n: usize = n.parse().expect("N is a number");
    let out = Path::new(out);
    let body = [b'x'; 420];
    match layout.as_str() {
        "dropins" => {
            dir(&out.join("timers.target.wants"));
            for i in 0..n {
                for kind in ["timer", "service"] {
                    let d = out.join(format!("jobguard@job-{i}.{kind}.d"));
                    dir(&d);
                    file(&d.join("50-jobguard.conf"), &body);
                }
                let link = out.join(format!("timers.target.wants/jobguard@job-{i}.timer"));
                std::os::unix::fs::symlink("/usr/lib/systemd/system/jobguard@.timer", &link)
                    .unwrap_or_else(|e| panic!("{}: {e}", link.display()));
            }
        }
        "units" | "timers" => {
            for i in 0..n {
                file(&out.join(format!("jobguard@job-{i}.timer")), &body);
                if layout == "units" {
                    file(&out.join(format!("jobguard@job-{i}.service")), &body);
                }
            }
            dir(&out.join("timers.target.d"));
            file(&out.join("timers.target.d/50-jobguard.conf"), &body);
        }
        other => panic!("unknown layout {other}"),
    }
}
