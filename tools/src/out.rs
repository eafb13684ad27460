//! Writing to stdout: a closed pipe (`rnic ... | head`) ends the program
//! quietly.

use crate::CliError;
use std::io::{self, Write};

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly.
pub fn write_or_quit(out: &mut impl Write, args: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    match out.write_fmt(args) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(CliError::new(format!("cannot write the output: {e}"))),
    }
}

/// Prints to stdout (see [`write_or_quit`]).
pub fn say(text: &str) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    write_or_quit(&mut out, format_args!("{text}"))?;
    let _ = out.flush();
    Ok(())
}
