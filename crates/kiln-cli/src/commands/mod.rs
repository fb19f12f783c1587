//! One module per subcommand.

pub mod circle;
pub mod dump;
pub mod inspect;
pub mod txn;
pub mod verify;
