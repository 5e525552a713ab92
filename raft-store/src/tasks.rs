//! The owner of one group's background tasks: the election timer, the
//! clock checks, housekeeping, the snapshot policy, group commit, the read
//! index and the bootstrap. [`GroupTasks`] starts each under a name, stops
//! them all when the group stops (cancelled, then joined), and reports
//! each one's state for `/metrics`.
//!
//! A task that ends while its group runs is a fault (each of them loops
//! for the group's life, but the bootstrap, which ends once the cluster
//! exists): it is logged at `error` and reported as failed, so a member
//! whose election timer died says so instead of quietly never campaigning.
//! A panic is reported the same way.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a task's end means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Runs as long as its group: ending before the stop is a fault.
    Group,
    /// Has a job to finish (the bootstrap): ending is its success.
    UntilDone,
}

/// Where one task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Running,
    /// A [`Lifetime::UntilDone`] task that finished its job.
    Done,
    /// Ended by [`GroupTasks::stop`].
    Stopped,
    /// Ended on its own while its group ran, or panicked.
    Failed,
}

/// One task's name and state, as [`GroupTasks::report`] gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskReport {
    pub name: &'static str,
    pub state: TaskState,
}

#[derive(Debug)]
struct Task {
    name: &'static str,
    state: Arc<Mutex<TaskState>>,
    /// Taken by [`GroupTasks::stop`] to join it.
    handle: Option<JoinHandle<()>>,
}

/// Starts, stops and reports one group's background tasks.
#[derive(Debug)]
pub struct GroupTasks {
    /// The group's label, for the logs.
    group: String,
    stop: CancellationToken,
    tasks: Mutex<Vec<Task>>,
}

/// Sets its task's end state when the task's future is dropped: finished,
/// cancelled, or unwound by a panic.
struct Ending {
    group: String,
    name: &'static str,
    lifetime: Lifetime,
    stop: CancellationToken,
    state: Arc<Mutex<TaskState>>,
    finished: bool,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let ended = if self.stop.is_cancelled() {
            TaskState::Stopped
        } else if self.finished && self.lifetime == Lifetime::UntilDone {
            TaskState::Done
        } else {
            let how = if std::thread::panicking() {
                "panicked"
            } else {
                "ended"
            };
            tracing::error!(
                group = %self.group,
                task = self.name,
                "a background task {how} while its group runs"
            );
            TaskState::Failed
        };
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = ended;
    }
}

impl GroupTasks {
    pub fn new(group: &str) -> Self {
        Self {
            group: group.to_owned(),
            stop: CancellationToken::new(),
            tasks: Mutex::default(),
        }
    }

    /// Runs `task` in the background as `name` until it ends or the group
    /// stops. Started after [`Self::stop`], it does not run.
    pub fn spawn(
        &self,
        name: &'static str,
        lifetime: Lifetime,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let state = Arc::new(Mutex::new(TaskState::Running));
        let mut ending = Ending {
            group: self.group.clone(),
            name,
            lifetime,
            stop: self.stop.clone(),
            state: state.clone(),
            finished: false,
        };
        let stop = self.stop.clone();
        let handle = tokio::spawn(async move {
            tokio::select! {
                biased;
                () = stop.cancelled() => {}
                () = task => ending.finished = true,
            }
            drop(ending);
        });
        self.lock().push(Task {
            name,
            state,
            handle: Some(handle),
        });
    }

    /// Cancels every task and waits until each has ended.
    pub async fn stop(&self) {
        self.stop.cancel();
        let handles: Vec<JoinHandle<()>> = self
            .lock()
            .iter_mut()
            .filter_map(|task| task.handle.take())
            .collect();
        for handle in handles {
            // A panic was reported by its `Ending` as it unwound.
            let _ = handle.await;
        }
    }

    /// Each task's name and state, in the order they were started.
    pub fn report(&self) -> Vec<TaskReport> {
        self.lock()
            .iter()
            .map(|task| TaskReport {
                name: task.name,
                state: *task.state.lock().unwrap_or_else(|p| p.into_inner()),
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_of(tasks: &GroupTasks, name: &str) -> TaskState {
        tasks
            .report()
            .into_iter()
            .find(|t| t.name == name)
            .expect("started")
            .state
    }

    #[tokio::test]
    async fn stopping_ends_tasks_that_loop_forever_and_joins_them() {
        let tasks = GroupTasks::new("directory");
        tasks.spawn("forever", Lifetime::Group, std::future::pending());
        let (_keep, mut closed) = tokio::sync::mpsc::channel::<()>(1);
        tasks.spawn("waits", Lifetime::Group, async move {
            closed.recv().await;
        });
        assert_eq!(state_of(&tasks, "forever"), TaskState::Running);
        tasks.stop().await;
        let report = tasks.report();
        assert!(
            report.iter().all(|t| t.state == TaskState::Stopped),
            "{report:?}"
        );
    }

    #[tokio::test]
    async fn a_task_that_ends_while_its_group_runs_is_failed_and_a_finished_job_is_done() {
        let tasks = GroupTasks::new("directory");
        tasks.spawn("timer", Lifetime::Group, async {});
        tasks.spawn("bootstrap", Lifetime::UntilDone, async {});
        tasks.spawn("panics", Lifetime::Group, async { panic!("on purpose") });
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while tasks.report().iter().any(|t| t.state == TaskState::Running) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("every task ends");
        assert_eq!(state_of(&tasks, "timer"), TaskState::Failed);
        assert_eq!(state_of(&tasks, "bootstrap"), TaskState::Done);
        assert_eq!(state_of(&tasks, "panics"), TaskState::Failed);
        // Stopping later changes no verdict.
        tasks.stop().await;
        assert_eq!(state_of(&tasks, "timer"), TaskState::Failed);
    }
}
