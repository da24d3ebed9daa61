//! Words for `sh` and `bash`: carma writes shell code that others read
//! (the replay script) and that jobs run (the conda hook, guarded lines), and
//! a path or a user's text must reach the shell as one literal word, never
//! as code.

/// `word` as one literal shell word: unchanged when it holds only
/// characters no shell treats specially, otherwise in single quotes (inside
/// which nothing is special), each `'` written as `'\''`.
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;
    use std::process::Command;

    #[test]
    fn plain_words_stay_bare_and_others_are_quoted() {
        assert_eq!(quote("/opt/conda/bin/conda"), "/opt/conda/bin/conda");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
    }

    #[test]
    fn bash_reads_every_quoted_word_back_unchanged() {
        let words = [
            "plain",
            "",
            "two words",
            "it's",
            "'",
            "$HOME `id` $(id) \\ \" ; & | < > * ? [ ] ~ # !",
            "new\nline",
            "ünïcode tab\t",
        ];
        for word in words {
            let out = Command::new("bash")
                .args(["--noprofile", "--norc", "-c"])
                .arg(format!("printf %s {}", quote(word)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), word, "{word:?}");
        }
    }
}
