//! Both image targets of the `Dockerfile` build with buildah on a locally
//! made base (`scripts/build-images.sh --local-base`: release binaries built
//! on the host, `BINARIES=prebuilt`, a `FROM scratch` runtime base holding
//! only the shared libraries `ldd` lists), and each image's entrypoint runs
//! from the image's own root filesystem (`buildah mount` + `chroot` as the
//! image's user): `--version`, and the broker serves Kafka metadata to kcat.
//! Also checked: non-root user 65532, OCI labels, broker image < 40 MB.
//!
//! Needs root and buildah (`scripts/install-test-deps.sh`); the first run
//! compiles the release binaries into this test's target directory.

mod packaging_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use moldau_e2e::{paths, run_with_timeout};
use packaging_support::{kcat, ok, repo};

const TAG: &str = "e2e";
/// PATH of the images (and of the chroot command itself).
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `<target>` of this test binary.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .map(PathBuf::from)
        .expect("test binary lives in <target>/<profile>/deps")
}

struct Buildah {
    root: PathBuf,
}

impl Buildah {
    fn cmd(&self) -> Command {
        let mut c = Command::new("buildah");
        c.args(["--storage-driver", "vfs", "--root"])
            .arg(self.root.join("root"))
            .arg("--runroot")
            .arg(self.root.join("run"));
        c
    }
    fn run(&self, args: &[&str]) -> Result<String> {
        let out = run_with_timeout(self.cmd().args(args), Duration::from_secs(300))?;
        Ok(ok(&format!("buildah {}", args.join(" ")), out)?
            .trim()
            .to_string())
    }
}

fn free_port() -> u16 {
    moldau_e2e::ports::unused_loopback_port()
}

#[test]
fn images_build_and_run_from_their_own_rootfs() -> Result<()> {
    if !paths::e2e_enabled() || std::env::var("MOLDAU_IMAGES").as_deref() == Ok("0") {
        eprintln!("MOLDAU_E2E=0 or MOLDAU_IMAGES=0: skipped");
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the image test needs root (buildah --isolation chroot, chroot); MOLDAU_IMAGES=0 skips it");
    }
    if Command::new("buildah").arg("--version").output().is_err() {
        bail!("buildah is missing: run scripts/install-test-deps.sh (MOLDAU_IMAGES=0 skips this test)");
    }
    let storage = target_dir().join("buildah-storage");
    let bah = Buildah {
        root: storage.clone(),
    };

    let t = Instant::now();
    let out = run_with_timeout(
        Command::new("bash")
            .arg(repo().join("scripts/build-images.sh"))
            .args(["--local-base", "--tag", TAG, "--storage-root"])
            .arg(&storage)
            .env("CARGO_TARGET_DIR", target_dir()),
        Duration::from_secs(60 * 60),
    )?;
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        if line.starts_with("[build-images")
            || line.contains("Compiling")
            || line.contains("Blocking")
        {
            eprintln!("{line}");
        }
    }
    let stdout = ok("scripts/build-images.sh", out)?;
    eprintln!("build-images.sh took {:?}", t.elapsed());
    // "image NAME UNCOMPRESSED COMPRESSED"
    let sizes: BTreeMap<String, (u64, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                ["image", name, raw, gz] => {
                    Some((name.to_string(), (raw.parse().ok()?, gz.parse().ok()?)))
                }
                _ => None,
            }
        })
        .collect();
    eprintln!("image sizes (uncompressed, compressed bytes): {sizes:?}");
    let (broker_size, _) = *sizes
        .get(&format!("moldau/broker:{TAG}"))
        .context("broker size")?;
    let (operator_size, _) = *sizes
        .get(&format!("moldau/operator:{TAG}"))
        .context("operator size")?;
    assert!(
        broker_size < 40_000_000,
        "broker image is {broker_size} bytes uncompressed"
    );
    assert!(
        operator_size < 80_000_000,
        "operator image is {operator_size} bytes uncompressed"
    );

    for (target, version_prefix) in [
        ("broker", "moldau-broker 0.1.0"),
        ("operator", "moldau-operator 0.1.0"),
    ] {
        let image = format!("moldau/{target}:{TAG}");
        let info: serde_json::Value =
            serde_json::from_str(&bah.run(&["inspect", "--type", "image", &image])?)?;
        let config = &info["OCIv1"]["config"];
        assert_eq!(config["User"], "65532:65532", "{config}");
        let labels = &config["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.title"],
            format!("moldau-{target}"),
            "{config}"
        );
        assert_eq!(
            labels["org.opencontainers.image.version"], "0.1.0",
            "{config}"
        );
        assert_eq!(
            labels["org.opencontainers.image.licenses"], "Apache-2.0",
            "{config}"
        );
        assert!(labels["org.opencontainers.image.revision"]
            .as_str()
            .is_some_and(|r| !r.is_empty()));
        let entrypoint: Vec<String> = serde_json::from_value(config["Entrypoint"].clone())?;
        assert_eq!(entrypoint, [format!("/usr/local/bin/moldau-{target}")]);

        let ctr = bah.run(&["from", "--pull-never", &image])?;
        let result = (|| -> Result<()> {
            let mnt = PathBuf::from(bah.run(&["mount", &ctr])?);
            // Nothing but the binary, the libraries it links and a few /etc files.
            let v = chroot_run(&mnt, &entrypoint, &["--version"], &[])?;
            assert!(v.starts_with(version_prefix), "{target} --version: {v}");
            if target == "broker" {
                broker_serves_from_rootfs(&mnt, &entrypoint)?;
            }
            Ok(())
        })();
        let _ = bah.run(&["umount", &ctr]);
        let _ = bah.run(&["rm", &ctr]);
        result?;
    }
    Ok(())
}

/// `entrypoint args` as a container runtime with `readOnlyRootFilesystem`
/// would run it: in a private mount namespace the image's root filesystem is
/// bind-mounted read-only, a tmpfs is mounted on its /tmp (the emptyDir the
/// operator gives brokers), and the process is chrooted there as 65532:65532
/// with only the image's PATH in its environment (plus `env`).
fn read_only_chroot(root: &Path, entrypoint: &[String], args: &[&str]) -> Command {
    let script = r#"set -e
ro="$1"; shift
mkdir -p "$ro"
mount --bind "$ROOTFS" "$ro"
mount -o remount,bind,ro "$ro"
mount -t tmpfs -o mode=1777,size=64m tmpfs "$ro/tmp"
exec env -i PATH="$IMAGE_PATH" $EXTRA_ENV chroot --userspec=65532:65532 "$ro" "$@""#;
    // Only a mount point: the mounts live in the private namespace.
    let ro = target_dir().join("buildah-storage/ro-rootfs");
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .arg(&ro)
    .args(entrypoint)
    .args(args)
    .env("ROOTFS", root)
    .env("IMAGE_PATH", IMAGE_PATH);
    c
}

/// Runs `entrypoint args` chrooted into `root` as 65532:65532 with only `env`.
fn chroot_run(
    root: &Path,
    entrypoint: &[String],
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String> {
    let mut c = read_only_chroot(root, entrypoint, args);
    let extra: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    c.env("EXTRA_ENV", extra.join(" "));
    ok(
        &format!("chroot {} {entrypoint:?}", root.display()),
        run_with_timeout(&mut c, Duration::from_secs(60))?,
    )
}

/// Starts the broker from the image's read-only root filesystem on a
/// loopback port, writing only its data under /tmp (a tmpfs), and asks it for
/// metadata with kcat.
fn broker_serves_from_rootfs(root: &Path, entrypoint: &[String]) -> Result<()> {
    let port = free_port();
    let http = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = read_only_chroot(root, entrypoint, &[])
        .env(
            "EXTRA_ENV",
            format!(
                "MOLDAU_LISTEN={listen} MOLDAU_HTTP_LISTEN=127.0.0.1:{http} MOLDAU_DATA_DIR=/tmp/moldau-data"
            ),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let res = loop {
        match kcat(&["-b", &listen, "-L", "-m", "5"], None) {
            Ok(md) => break Ok(md),
            Err(e) if Instant::now() > deadline => break Err(e),
            Err(_) => {
                if let Some(st) = child.try_wait()? {
                    let out = child.wait_with_output()?;
                    bail!(
                        "broker exited ({st}): {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let md = res?;
    assert!(md.contains("1 brokers"), "{md}");
    Ok(())
}
