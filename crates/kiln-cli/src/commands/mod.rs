//! One module per subcommand.

pub mod dump;
pub mod edgetpu;
pub mod executorch;
pub mod inspect;
pub mod params;
pub mod run;
pub mod verify;
