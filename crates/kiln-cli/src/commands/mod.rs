//! One module per subcommand.

pub mod dump;
pub mod inspect;
pub mod params;
pub mod verify;
