//! The dev-mode signing secret: made once, kept in the data directory, reused on restart so
//! tokens printed by `clinic-booking token` keep working.

use std::{io::Write, path::Path};

use rand::RngCore;

use super::Secret;

/// File name of the dev-mode secret inside the data directory.
const FILE: &str = "clinic-booking.jwt-secret";

/// Reads the dev secret from `data_dir`, creating it (mode 0600) on first use. Returns the
/// secret and whether it was just created.
pub fn load_or_create_dev_secret(data_dir: &Path) -> std::io::Result<(Secret, std::path::PathBuf, bool)> {
    let path = data_dir.join(FILE);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if existing.len() >= 32 {
            return Ok((Secret::new(existing), path, false));
        }
    }
    std::fs::create_dir_all(data_dir)?;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let value = hex::encode(bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&path)?;
    file.write_all(value.as_bytes())?;
    Ok((Secret::new(value), path, true))
}
