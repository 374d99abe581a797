//! Names this build by its sources: the reader's `BUILD` is part of prune-gate's parse cache key,
//! so a changed reader never answers from a cache an older one filled.

use std::fs;

fn main() {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
    let mut files = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for entry in fs::read_dir("src").expect("src/") {
        files.push(entry.expect("src/ entry").path().display().to_string());
    }
    files.sort();
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
        for byte in file.bytes().chain(fs::read(file).expect("a source file")) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=PRUNE_GATE_YAML_BUILD={hash:016x}");
}
