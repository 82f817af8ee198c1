//! Building this crate needs the `bpf-linker` binary, a dependency cargo
//! cannot express. Rebuild whenever the linker on PATH changes (same approach
//! as aya-template).
use which::which;

fn main() {
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => {
            println!("cargo:warning=bpf-linker not found on PATH ({err}); run `cargo xtask setup`")
        }
    }
}
