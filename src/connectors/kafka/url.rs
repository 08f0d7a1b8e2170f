//! Parsing of `kafka://` URLs.

use super::KafkaError;

/// The parts of a `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?k=v&…]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaUrl {
    /// The bootstrap servers, `host:port[,…]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The query's `key=value` pairs, in order.
    pub params: Vec<(String, String)>,
}

impl KafkaUrl {
    /// Parses `url`; `None` when it does not start with `kafka://`.
    pub fn parse(url: &str) -> Option<std::result::Result<KafkaUrl, KafkaError>> {
        let rest = url.strip_prefix("kafka://")?;
        let bad = |reason: &str| KafkaError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        Some((|| {
            let (path, query) = match rest.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (rest, None),
            };
            let (brokers, topic) = path
                .split_once('/')
                .ok_or_else(|| bad("expected kafka://HOST:PORT/TOPIC"))?;
            if brokers.is_empty() {
                return Err(bad("no broker address"));
            }
            for b in brokers.split(',') {
                let (host, port) = b
                    .rsplit_once(':')
                    .ok_or_else(|| bad("a broker address needs a port (HOST:PORT)"))?;
                if host.is_empty() || port.parse::<u16>().is_err() {
                    return Err(bad("a broker address needs a port (HOST:PORT)"));
                }
            }
            if topic.is_empty() || topic.contains('/') {
                return Err(bad("expected one topic after the address"));
            }
            if !topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(bad(
                    "a topic name has only letters, digits, '.', '_' and '-'",
                ));
            }
            let mut params = Vec::new();
            for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| bad("query parameters are key=value"))?;
                params.push((k.to_string(), v.to_string()));
            }
            Ok(KafkaUrl {
                brokers: brokers.to_string(),
                topic: topic.to_string(),
                params,
            })
        })())
    }

    /// The value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092/words?start=latest")
            .expect("a kafka URL")
            .expect("valid");
        assert_eq!(u.brokers, "127.0.0.1:9092");
        assert_eq!(u.topic, "words");
        assert_eq!(u.param("start"), Some("latest"));
        assert!(KafkaUrl::parse("words.txt").is_none());
        for bad in [
            "kafka://",
            "kafka://host/words",
            "kafka://host:x/words",
            "kafka://host:1/",
            "kafka://host:1/a/b",
            "kafka://host:1/t?start",
        ] {
            let e = KafkaUrl::parse(bad).expect("a kafka URL").expect_err(bad);
            assert!(e.to_string().starts_with("invalid Kafka URL"), "{e}");
        }
    }
}
