//! One module per subcommand.

pub mod bench;
pub mod bench_gemm;
pub mod chat;
pub mod circle;
pub mod dump;
pub mod edgetpu;
pub mod etdump;
pub mod executorch;
pub mod generate;
pub mod inspect;
pub mod lower;
pub mod npy;
pub mod params;
pub mod profile;
pub mod report;
pub mod run;
pub mod tflite;
pub mod txn;
pub mod verify;
