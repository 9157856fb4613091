//! A webhook receiver on loopback, for `notify.webhook`: it records every request
//! (headers and body), answers `200`, and can hold the first request unanswered, as a
//! receiver that hangs would, until the test lets it go.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Names lowercased, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Hit {
    /// The first header `name` (any case), or a panic naming it.
    pub fn header(&self, name: &str) -> &str {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// The receiver. Dropped, it lets go of a connection it holds.
#[derive(Debug)]
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook/TOKEN`: a path with a token in it, as Discord's.
    pub url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
    /// Whether a connection is held unanswered right now.
    holding: Arc<AtomicBool>,
    release: Mutex<Option<mpsc::Sender<()>>>,
}

impl Receiver {
    /// Answers every request `200`.
    pub fn start() -> Receiver {
        Receiver::with(false)
    }

    /// Records the first request and then holds its connection, unanswered, until
    /// [`Receiver::release`] closes it; answers every later one.
    pub fn holding_first() -> Receiver {
        Receiver::with(true)
    }

    fn with(hold_first: bool) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!(
            "http://{}/hook/TOKEN-7f3a",
            listener.local_addr().expect("its address")
        );
        let hits = Arc::new(Mutex::new(Vec::new()));
        let holding = Arc::new(AtomicBool::new(false));
        let (release, released) = mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(Some(released)));
        let (h, held) = (hits.clone(), holding.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let hold = hold_first
                    .then(|| released.lock().unwrap().take())
                    .flatten();
                let (h, held) = (h.clone(), held.clone());
                std::thread::spawn(move || serve(stream, &h, hold, &held));
            }
        });
        Receiver {
            url,
            hits,
            holding,
            release: Mutex::new(Some(release)),
        }
    }

    /// Every request so far, in order of arrival.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// The requests so far once `enough` says they are (within `secs` seconds), or a
    /// panic listing what came.
    pub fn wait_for(&self, secs: u64, enough: impl Fn(&[Hit]) -> bool) -> Vec<Hit> {
        crate::eventually(secs, || {
            let hits = self.hits();
            enough(&hits).then_some(hits)
        })
        .unwrap_or_else(|| {
            let bodies: Vec<String> = self
                .hits()
                .iter()
                .map(|h| String::from_utf8_lossy(&h.body).into_owned())
                .collect();
            panic!("the receiver did not get what was expected; it got {bodies:#?}")
        })
    }

    /// Whether the held connection is still held (open, unanswered).
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// Closes the held connection without an answer.
    pub fn release(&self) {
        self.release.lock().unwrap().take();
    }
}

/// Serves one connection: requests one after another (the client keeps it alive),
/// each recorded and answered, except that with `hold` the first is recorded and then
/// held until `hold` hears from the test (or the test drops its end).
fn serve(
    stream: TcpStream,
    hits: &Mutex<Vec<Hit>>,
    hold: Option<mpsc::Receiver<()>>,
    holding: &AtomicBool,
) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::new(stream);
    let mut hold = hold;
    while let Some(hit) = read_request(&mut r) {
        hits.lock().unwrap().push(hit);
        if let Some(wait) = hold.take() {
            holding.store(true, Ordering::SeqCst);
            let _ = wait.recv();
            holding.store(false, Ordering::SeqCst);
            let _ = out.shutdown(std::net::Shutdown::Both);
            return;
        }
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";
        if out.write_all(answer).is_err() {
            return;
        }
    }
}

/// One request's headers and body; `None` when the connection ends first.
fn read_request(r: &mut impl BufRead) -> Option<Hit> {
    let mut line = String::new();
    let mut headers = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        if first {
            first = false;
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: u64 = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = Vec::new();
    r.take(len).read_to_end(&mut body).ok()?;
    Some(Hit { headers, body })
}
