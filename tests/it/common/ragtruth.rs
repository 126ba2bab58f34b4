//! The labelled RAGTruth QA answers of `../shared/data` as traces, split by their human label,
//! for the tests that stream real answers (the labels build the stream; ragwatch never sees them).

#![allow(dead_code)]

use serde_json::Value;

use super::labelled_data;

/// The labelled answers, split by their human label.
pub struct Data {
    pub faithful: Vec<Value>,
    pub unfaithful: Vec<Value>,
}

impl Data {
    pub fn load() -> Option<Data> {
        let path = labelled_data("ragtruth_qa_train.jsonl");
        let text = std::fs::read_to_string(path).ok()?;
        let (mut faithful, mut unfaithful) = (Vec::new(), Vec::new());
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut v: Value = serde_json::from_str(line).unwrap();
            let label = v["label_faithful"].as_bool().unwrap();
            // The labels build the stream; ragwatch never sees them.
            let obj = v.as_object_mut().unwrap();
            obj.remove("label_faithful");
            obj.remove("label_spans");
            // The passages carry no retriever score; a service's traces would. Placeholder scores
            // by rank (nothing but the retrieval panels reads them).
            let contexts = obj["contexts"].as_array_mut().unwrap();
            for (rank, c) in contexts.iter_mut().enumerate() {
                let text = c.as_str().unwrap().to_owned();
                *c = serde_json::json!({"text": text, "score": 0.9 - 0.1 * rank as f64});
            }
            if label {
                faithful.push(v);
            } else {
                unfaithful.push(v);
            }
        }
        Some(Data {
            faithful,
            unfaithful,
        })
    }

    /// Answer text -> human label, for the judge stand-in.
    pub fn labels(&self) -> Vec<(String, bool)> {
        let answer = |v: &Value| v["answer"].as_str().unwrap().to_owned();
        self.faithful
            .iter()
            .map(|v| (answer(v), true))
            .chain(self.unfaithful.iter().map(|v| (answer(v), false)))
            .collect()
    }
}
