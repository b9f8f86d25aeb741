"""A training step of one (batch, sequence) shape, as one object that owns its buffers.

Life cycle: ``Step(model, optimizer, B, T, accum=N)`` allocates every buffer the step writes
(the model's activation table for a micro-batch of B sequences, the token ids and losses of
N of them, a metrics log); ``run(tokens, targets)`` copies the N micro-batches in (one
host-to-device copy) and enqueues N forward and backward passes, whose gradients add up in
the model's float32 gradient buffer, then one update; ``metrics()`` is the
one read back, made every log interval, of each step's loss, gradient norm and learning
rate since the last call. Between two metrics() the host never waits for the device.

Nothing in a step changes between steps but the contents of its buffers: the optimizer's
learning rate and step number live on the device (optim.AdamW), so on the CUDA backend the
second run captures the whole step into a CUDA graph and every later run replays it, one
launch from the host instead of ~180. Under data parallelism the graph holds the gradient
all-reduce too, once per step: the last micro-batch's backward hands each range of the
gradient to the world's sync as it becomes final, and NCCL reduces it on a second stream
that the capture takes in (microgpt.distributed). The first run is eager (it compiles the
kernels, and NCCL connects
the ranks). The simulator and the NumPy backend always run eagerly, as does
``graph=False`` (for debugging: each launch then runs, and fails, where it is written).
"""
import numpy as np

from microgpt.activations import BufferSpec, Buffers, activation_specs
from microgpt.distributed import LOCAL
from microgpt.ops import LOG_COLUMNS

LOG_ROWS = 1024      # steps between two metrics() calls, at most


def step_specs(cfg, B, T, precision="fp32", accum=1, recompute="off", token_runs=False):
    """Every buffer a training step of accum micro-batches of shape (B, T) owns: the
    activations of one, the token ids, targets and losses of every one (in place of the
    activation table's own "batch" and "losses"), and the log that record_step fills. (The
    parameters, gradients, moments, the squared gradient norm and the hyper-parameters
    belong to the model and the optimizer: every shape shares them.) recompute,
    token_runs: the model's (activation_specs)."""
    own = {"batch": BufferSpec("batch", (accum, 4 if token_runs else 2, B, T), "int32"),
           "losses": BufferSpec("losses", (accum, B * T))}
    return ([own.get(s.name, s)
             for s in activation_specs(cfg, B, T, precision, recompute=recompute,
                                       token_runs=token_runs)]
            + [BufferSpec("log", (LOG_ROWS, len(LOG_COLUMNS)))])


class MicroBatch:
    """The step's buffers as micro-batch n's passes see them: its own token ids, targets
    and losses, every other buffer shared."""

    def __init__(self, buffers, n):
        self._buffers = buffers
        self.batch, self.losses = buffers.batch[n], buffers.losses[n]

    def __getattr__(self, name):
        return getattr(self._buffers, name)


class Step:
    def __init__(self, model, optimizer, B, T, *, accum=1, sync=LOCAL, graph=True):
        self.model, self.optimizer, self.sync = model, optimizer, sync
        self.backend = model.backend
        self.accum = accum
        self.micro_shape = (B, T)
        self.shape = (accum * B, T)     # of run()'s batch: micro-batch n is rows nB to (n+1)B
        model.check_context(T)
        self.buffers = Buffers(self.backend, step_specs(
            model.config, B, T, model.precision, accum, recompute=model.recompute,
            token_runs=model.token_runs is not None))
        self.micro = [MicroBatch(self.buffers, n) for n in range(accum)]
        self.all_losses = self.buffers.losses.reshape(accum * B * T)
        self.graph = graph and self.backend.graphs
        self._captured = {}         # phases -> the graph that replays them
        self._ran = set()           # the phase sequences run eagerly once (compiled)
        self.unread = 0             # steps run since the last metrics()

    # the phases ------------------------------------------------------------------------
    def forward(self):
        """The logits of the first micro-batch in the buffers (evaluation's)."""
        self.model.enqueue_forward(self.micro[0])

    def loss(self):
        """The per-token losses alone (evaluation: training gets them from backward)."""
        self.model.enqueue_loss(self.micro[0])

    def accumulate(self):
        """Each micro-batch's forward and backward: the per-token losses and the gradient
        of their mean over all the micro-batches, summed into the model's gradient buffer;
        under data parallelism averaged over the ranks by sync (world.gradient_sync(model))
        while the last backward runs."""
        for n, micro in enumerate(self.micro):
            self.model.enqueue_forward(micro)
            self.model.enqueue_backward(micro, self.sync if n == self.accum - 1 else LOCAL,
                                        micro=(n, self.accum))

    def update(self):
        """One AdamW update at the scheduled learning rate, and the step's metrics logged
        on the device (its loss the mean over every micro-batch's tokens)."""
        self.optimizer.update()
        self.backend.record_step(self.buffers.log, self.all_losses,
                                 self.optimizer.norm_squared, self.optimizer.hparams)

    # running -----------------------------------------------------------------------
    def run(self, tokens, targets):
        """Enqueue one training step on host int arrays tokens and targets (accum x B, T):
        micro-batch n is rows n B to (n + 1) B."""
        if self.unread == LOG_ROWS:
            raise RuntimeError(f"{LOG_ROWS} steps since the last metrics(): read them first")
        self.load(tokens, targets, self.buffers.batch)
        self._replay(("accumulate", "update"))
        # the host's count of the device's step number (the capture ran update() once)
        self.optimizer.step_count += 1
        self.unread += 1

    def evaluate(self, tokens, targets):
        """The mean loss of a batch of one micro-batch's shape (no backward, no update) -> a
        float, read back. A batch of fewer rows (the whole validation split's last) runs
        padded with copies of its first row, which are not scored: the step's buffers and
        graph serve it, and no second set of activations is allocated."""
        rows = len(tokens)
        if 0 < rows < self.micro_shape[0]:
            pad = np.repeat(np.asarray(tokens)[:1], self.micro_shape[0] - rows, axis=0), \
                np.repeat(np.asarray(targets)[:1], self.micro_shape[0] - rows, axis=0)
            tokens, targets = np.concatenate([tokens, pad[0]]), np.concatenate([targets, pad[1]])
        self.load(tokens, targets, self.micro[0].batch)
        self._replay(("forward", "loss"))
        return self.backend.mean(self.micro[0].losses[:rows * self.micro_shape[1]])

    def load(self, tokens, targets, batch):
        """Token ids and targets (host int arrays) into batch, the step's (accum, rows, B, T)
        for run(), with each micro-batch's token_runs where the model takes them, or into a
        micro-batch's first two rows for evaluate(): one copy to the device."""
        training = len(batch.shape) == 4
        shape = self.shape if training else self.micro_shape
        for name, ids in (("tokens", tokens), ("targets", targets)):
            if tuple(ids.shape) != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {tuple(ids.shape)}")
            self.model.check_tokens(ids)
        B, T = self.micro_shape
        rows = [tokens.reshape(-1, B, T), targets.reshape(-1, B, T)]
        if training and self.model.token_runs:     # (2, accum, B, T): sorted on the host
            rows += list(np.stack([self.model.token_runs(ids) for ids in rows[0]], axis=1))
        if not training:
            batch = batch[:2]
        self.backend.copy(batch, np.stack(rows, axis=1).reshape(batch.shape).astype(np.int32))

    def _replay(self, phases):
        """Run the phases: eagerly the first time (which compiles their kernels), then
        captured once and replayed."""
        def enqueue():
            for phase in phases:
                getattr(self, phase)()
        if not self.graph or phases not in self._ran:
            enqueue()
            self._ran.add(phases)
            return
        if phases not in self._captured:
            self._captured[phases] = Captured(self.backend.capture(enqueue), self.sync)
        self._captured[phases].graph.replay()

    def metrics(self):
        """The one read back: {column: host array} of microgpt.ops.LOG_COLUMNS, one entry
        per step run since the last call, in order."""
        n, self.unread = self.unread, 0
        if n == 0:
            return {name: np.empty(0) for name in LOG_COLUMNS}
        log = self.backend.to_host(self.buffers.log).astype(np.float64)
        last = (self.optimizer.step_count - 1) % LOG_ROWS
        order = [(last - n + 1 + i) % LOG_ROWS for i in range(n)]
        return {name: log[order, j] for j, name in enumerate(LOG_COLUMNS)}


class Captured:
    """A captured graph, holding the gradient sync whose all-reduces it captured until the
    graph itself is destroyed. NCCL (2.26 and later) destroys a communicator only once
    every CUDA graph that captured one of its calls is gone, and waits for that, forever
    if need be: released in the other order, say the Step's attributes in the order they
    were set, a rank hangs at its exit after its last step."""

    def __init__(self, graph, sync):
        self.graph, self.sync = graph, sync

    def __del__(self):
        self.graph = None       # its CUDA graph destroyed here, the sync only after
