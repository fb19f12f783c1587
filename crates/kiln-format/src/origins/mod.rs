//! Node-origin information of ONE's luci-profile: the two metadata tables stored in Circle
//! files ([`tables`]) and the origin model with its preservation rules ([`origin`]).
//! Reading them from and writing them to a Circle file is in [`crate::circle::origins`].

pub mod origin;
pub mod tables;

pub use origin::{graph_origins, origin_table, to_tables, Origin, OriginMap, Source};
pub use tables::{
    decode_op_table, decode_source_table, encode_op_table, encode_source_table, OpTable,
    SourceTable, OP_TABLE_NAME, SOURCE_TABLE_NAME,
};
