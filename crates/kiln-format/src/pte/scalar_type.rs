//! ExecuTorch's element types: [`ScalarType`], from the `kiln-dtype` crate that kiln-format
//! and kiln-kernels share.

pub use kiln_dtype::ScalarType;

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbering and the schema names are the schema's (kiln-schema is generated from
    /// `scalar_type.fbs`).
    #[test]
    fn numbering_matches_executorch() {
        use kiln_schema::program::executorch_flatbuffer::ScalarType as Fb;
        for fb in Fb::ENUM_VALUES {
            let t = ScalarType::from_code(i64::from(fb.0)).unwrap();
            assert_eq!(t.schema_name(), fb.variant_name().unwrap().to_ascii_lowercase());
        }
        assert_eq!(ScalarType::Float.size(), 4);
        assert_eq!(ScalarType::BFloat16.size(), 2);
        assert_eq!(ScalarType::Long.schema_name(), "long");
    }
}
