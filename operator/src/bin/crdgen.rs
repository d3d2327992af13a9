//! `crdgen`: prints the CRDs as YAML, or with `--out DIR` writes one file per
//! CRD (`<plural>.<group>.yaml`) into DIR (the repository keeps them in `crds/`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// Generate the Moldau CRD YAML from the Rust types.
#[derive(Parser)]
struct Args {
    /// Write one file per CRD into this directory instead of printing.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let files = moldau_operator::crd::crd_files()?;
    match args.out {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in files {
                let path = dir.join(name);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        None => {
            let docs: Vec<String> = files.into_iter().map(|(_, yaml)| yaml).collect();
            print!("{}", docs.join("---\n"));
        }
    }
    Ok(())
}
