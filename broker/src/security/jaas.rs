//! The JAAS configuration text Kafka's `sasl.jaas.config` properties hold
//! (`<LoginModule class> <flag> key="value" …;`), read for what a broker
//! needs from it: PLAIN's users and passwords, the `user_<name>="<pw>"`
//! options of `org.apache.kafka.common.security.plain.PlainLoginModule`
//! (Kafka's default PLAIN server callback reads the same options).
//!
//! As in Kafka's `JaasConfig`, the property holds exactly one login
//! module, its flag is one of `required`, `requisite`, `sufficient` and
//! `optional`, values are quoted or bare, and the entry ends with `;`.
//! Pure.

use std::collections::BTreeMap;

/// PLAIN's login module.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";

/// One parsed login module entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginModule {
    pub class: String,
    pub flag: String,
    pub options: BTreeMap<String, String>,
}

struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// A bare word: up to whitespace, `=` or `;`.
    fn word(&mut self) -> Option<&'a str> {
        self.skip_space();
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || c == '=' || c == ';' || c == '"')
            .unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let (w, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(w)
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    /// A quoted value (`\` escapes the next character) or a bare word.
    fn value(&mut self) -> Result<String, String> {
        self.skip_space();
        let Some(quoted) = self.rest.strip_prefix('"') else {
            return self
                .word()
                .map(str::to_string)
                .ok_or_else(|| "an option has no value".to_string());
        };
        let mut out = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, escaped)) => out.push(escaped),
                    None => break,
                },
                '"' => {
                    self.rest = &quoted[i + 1..];
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        Err("a quoted value is not closed".into())
    }
}

/// Parses a `sasl.jaas.config` value: its one login module.
pub fn parse(config: &str) -> Result<LoginModule, String> {
    let mut t = Tokens { rest: config };
    let class = t
        .word()
        .ok_or_else(|| "the JAAS config names no login module".to_string())?
        .to_string();
    let flag = t
        .word()
        .ok_or_else(|| format!("login module {class} has no control flag"))?
        .to_ascii_lowercase();
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!("{flag:?} is not a JAAS control flag"));
    }
    let mut options = BTreeMap::new();
    loop {
        if t.eat(';') {
            break;
        }
        let key = t
            .word()
            .ok_or_else(|| "the JAAS config does not end with ';'".to_string())?
            .to_string();
        if !t.eat('=') {
            return Err(format!("option {key} has no '='"));
        }
        let value = t.value()?;
        options.insert(key, value);
    }
    t.skip_space();
    if !t.rest.is_empty() {
        return Err("a sasl.jaas.config holds exactly one login module".into());
    }
    Ok(LoginModule {
        class,
        flag,
        options,
    })
}

/// PLAIN's users and passwords from a JAAS config of its login module.
pub fn plain_users(config: &str) -> Result<BTreeMap<String, String>, String> {
    let module = parse(config)?;
    if module.class != PLAIN_LOGIN_MODULE {
        return Err(format!(
            "PLAIN's JAAS config names {}, not {PLAIN_LOGIN_MODULE}",
            module.class
        ));
    }
    Ok(module
        .options
        .into_iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("user_")
                .filter(|name| !name.is_empty())
                .map(|name| (name.to_string(), v))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_users_come_from_the_user_options() {
        let users = plain_users(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret"
               user_admin="admin-secret" user_alice="p\"w;d" user_bob=bare;"#,
        )
        .unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users["admin"], "admin-secret");
        assert_eq!(users["alice"], "p\"w;d", "quotes and escapes");
        assert_eq!(users["bob"], "bare");
    }

    #[test]
    fn malformed_configs_are_refused_not_guessed() {
        for bad in [
            "",
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            "org.apache.kafka.common.security.plain.PlainLoginModule always;",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"x\"",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"x;",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a;",
            "org.apache.kafka.common.security.plain.PlainLoginModule required; other required;",
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ] {
            assert!(plain_users(bad).is_err(), "{bad:?}");
        }
    }
}
