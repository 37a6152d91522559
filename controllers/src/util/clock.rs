//! "Now" behind a trait, as upstream's `clock.Clock`: controllers whose decisions depend on
//! the time (CronJob schedules, TTLs, deadlines) are unit-tested by moving a fake clock
//! instead of waiting.

use std::sync::Mutex;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct FakeClock(Mutex<Timestamp>);

impl FakeClock {
    pub fn new(at: Timestamp) -> Self {
        FakeClock(Mutex::new(at))
    }

    pub fn set(&self, at: Timestamp) {
        *self.0.lock().expect("fake clock") = at;
    }

    pub fn step(&self, by: SignedDuration) {
        let mut t = self.0.lock().expect("fake clock");
        *t = t.checked_add(by).expect("time in range");
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().expect("fake clock")
    }
}
