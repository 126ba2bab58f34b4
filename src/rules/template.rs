//! The generator's one template rule: `@@name@@` is replaced by the variable `name`. Nothing else
//! is special, so Prometheus's `{{ $labels }}`, Go's `printf` and Grafana's `$variables` pass
//! through untouched.

/// `template` with every `@@name@@` replaced by its value in `vars`.
///
/// # Panics
/// On a placeholder without a variable: templates are compiled in, so that is a bug the unit
/// tests and the consistency test catch, never bad input.
pub(super) fn fill<S: AsRef<str>>(template: &str, vars: &[(&str, S)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("@@") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("@@")
            .unwrap_or_else(|| panic!("unclosed @@ in a template near {:?}", &rest[start..]));
        let name = &after[..end];
        let value = vars
            .iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("template variable @@{name}@@ has no value"));
        out.push_str(value.1.as_ref());
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_everything_else_kept() {
        let t = "a @@x@@ {{ $labels.stratum }} [@@y@@]";
        assert_eq!(
            fill(t, &[("x", "1"), ("y", "5m")]),
            "a 1 {{ $labels.stratum }} [5m]"
        );
    }

    #[test]
    #[should_panic(expected = "@@z@@ has no value")]
    fn a_placeholder_without_a_value_is_a_bug() {
        fill("@@z@@", &[("x", "1")]);
    }
}
