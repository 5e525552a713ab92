//! Snapshots as files: the on-disk and on-the-wire format of a state
//! machine snapshot, and the directory that holds a member's snapshots.
//!
//! A snapshot is written row by row from one redb read transaction and read
//! back row by row into one write transaction, so neither building,
//! sending nor installing one holds more than a row (and openraft's chunk)
//! in memory, whatever the number of records. openraft sends the file in
//! chunks of `snapshot_chunk` bytes (its `Chunked` transport seeks and reads
//! it); the receiver writes them into a file from
//! [`SnapshotDir::receiving`].
//!
//! # Format (version 1)
//!
//! ```text
//! 0xFF × 10  "ONCESNAP"  u16 version  u16 tables   header, little endian
//! u8 table  u32 key len  u32 value len  key  value   one frame per row
//! u8 0xFF  u64 rows  u32 crc32                   trailer
//! ```
//!
//! `table` indexes the state machine's data tables in their declared order;
//! a snapshot that carries fewer tables comes from an older build (the
//! reader says so, the installer derives the rest). The CRC-32 covers every
//! byte before it, so a truncated or damaged file is refused before its
//! transaction commits. A file without the magic is a snapshot from a build
//! before this format (one postcard value, read whole): it is still
//! installed, so a new member catches up from an old leader. The other way
//! round, the magic's ten `0xFF` bytes are a varint postcard refuses, so a
//! member of a build before this format fails to install this file with an
//! error rather than read its bytes as tables (postcard does not require a
//! value to use all its input, and "ONCESNAP" alone reads as the start of
//! 79 tables: whether the rest failed would depend on the bytes).
//! Such a member needs upgrading before it can catch up by snapshot.
//!
//! # Files
//!
//! `<id>.snap` is a complete snapshot (the id hex-encoded: ids come from
//! peers and never name a path). Files are written as `*.tmp`, synced and
//! renamed; the state machine records which snapshot is current only after
//! the rename, and removes the others after it has. Leftover `*.tmp` files
//! (a crash while building or receiving) are removed when the directory is
//! opened.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MAGIC: &[u8; 18] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffONCESNAP";
const VERSION: u16 = 1;
const END: u8 = 0xFF;
/// Largest key or value a frame may claim, so a damaged length cannot make
/// the reader allocate gigabytes before the checksum refuses the file.
const MAX_FIELD: u32 = 64 << 20;

/// A member's snapshot files, beside its state machine.
#[derive(Debug)]
pub struct SnapshotDir {
    dir: PathBuf,
    /// Files handed out to receive a snapshot into, not yet installed.
    receiving: Mutex<Vec<PathBuf>>,
}

impl SnapshotDir {
    /// The snapshot directory of the state machine at `state`
    /// (`state.redb` → `state.snapshots/`), created if missing, with any
    /// file a crash left half written removed.
    pub fn beside(state: &Path) -> io::Result<Self> {
        let dir = state.with_extension("snapshots");
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                fs::remove_file(&path)?;
            }
        }
        Ok(Self {
            dir,
            receiving: Mutex::new(Vec::new()),
        })
    }

    /// Where the complete snapshot `id` lives.
    pub fn path_of(&self, id: &str) -> PathBuf {
        let name: String = id.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.snap"))
    }

    /// Starts writing a snapshot.
    pub fn writer(&self, tables: u16) -> io::Result<SnapshotWriter> {
        let path = self.temp_path("building");
        let file = File::create(&path)?;
        SnapshotWriter::start(path, file, tables)
    }

    /// A new empty file to receive a snapshot into. Files handed out before
    /// belong to streams openraft has abandoned (it receives one at a
    /// time, and installs on the same worker that asks for this): removed.
    pub fn receiving(&self) -> io::Result<File> {
        let path = self.temp_path("receiving");
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut receiving = self.receiving.lock().unwrap_or_else(|p| p.into_inner());
        for old in receiving.drain(..) {
            remove_if_present(&old)?;
        }
        receiving.push(path);
        Ok(file)
    }

    /// Makes `file` the complete snapshot `id`, synced. A file
    /// [`Self::receiving`] handed out (found by inode) is renamed; any other
    /// (openraft may install a snapshot it was handed whole) is copied.
    pub fn keep_received(&self, file: &File, id: &str) -> io::Result<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata()?;
        let same = |p: &Path| {
            fs::metadata(p).is_ok_and(|m| m.ino() == held.ino() && m.dev() == held.dev())
        };
        let to = self.path_of(id);
        if same(&to) {
            return Ok(to);
        }
        let from = {
            let mut receiving = self.receiving.lock().unwrap_or_else(|p| p.into_inner());
            receiving
                .iter()
                .position(|p| same(p))
                .map(|at| receiving.remove(at))
        };
        let from = match from {
            Some(from) => {
                file.sync_all()?;
                from
            }
            None => {
                let copy = self.temp_path("copying");
                let mut source = file.try_clone()?;
                source.seek(SeekFrom::Start(0))?;
                let mut out = File::create(&copy)?;
                io::copy(&mut source, &mut out)?;
                out.sync_all()?;
                copy
            }
        };
        fs::rename(&from, &to)?;
        self.sync()?;
        Ok(to)
    }

    /// Removes every complete snapshot but `current`.
    pub fn remove_all_but(&self, current: &str) -> io::Result<()> {
        let keep = self.path_of(current);
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "snap") && path != keep {
                remove_if_present(&path)?;
            }
        }
        Ok(())
    }

    fn temp_path(&self, what: &str) -> PathBuf {
        self.dir
            .join(format!("{what}-{:016x}.tmp", rand::random::<u64>()))
    }

    fn sync(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes one snapshot file, row by row.
#[derive(Debug)]
pub struct SnapshotWriter {
    path: PathBuf,
    out: BufWriter<File>,
    crc: crc32fast::Hasher,
    rows: u64,
}

impl SnapshotWriter {
    fn start(path: PathBuf, file: File, tables: u16) -> io::Result<Self> {
        let mut writer = Self {
            path,
            out: BufWriter::with_capacity(1 << 20, file),
            crc: crc32fast::Hasher::new(),
            rows: 0,
        };
        writer.put(MAGIC)?;
        writer.put(&VERSION.to_le_bytes())?;
        writer.put(&tables.to_le_bytes())?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc.update(bytes);
        self.out.write_all(bytes)
    }

    pub fn row(&mut self, table: u8, key: &[u8], value: &[u8]) -> io::Result<()> {
        let len = |b: &[u8]| {
            u32::try_from(b.len())
                .ok()
                .filter(|n| *n <= MAX_FIELD)
                .ok_or_else(|| io::Error::other("a snapshot row larger than a frame allows"))
        };
        let (k, v) = (len(key)?, len(value)?);
        self.put(&[table])?;
        self.put(&k.to_le_bytes())?;
        self.put(&v.to_le_bytes())?;
        self.put(key)?;
        self.put(value)?;
        self.rows += 1;
        Ok(())
    }

    /// Writes the trailer and makes the file the complete snapshot `id` in
    /// `dir`, synced (file and directory) before this returns.
    pub fn finish(mut self, dir: &SnapshotDir, id: &str) -> io::Result<PathBuf> {
        let rows = self.rows;
        self.put(&[END])?;
        self.put(&rows.to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let to = dir.path_of(id);
        fs::rename(&self.path, &to)?;
        dir.sync()?;
        Ok(to)
    }
}

/// What a snapshot file holds, as far as its start tells.
#[derive(Debug)]
pub enum SnapshotContent {
    /// This format: rows to read one by one.
    Rows(SnapshotReader),
    /// A build before this format: the whole postcard value.
    Legacy(Vec<u8>),
}

impl SnapshotContent {
    pub fn open(mut file: File) -> io::Result<Self> {
        file.seek(SeekFrom::Start(0))?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        // A legacy file may be shorter than the magic (an empty state).
        let mut head = Vec::with_capacity(MAGIC.len());
        (&mut input)
            .take(MAGIC.len() as u64)
            .read_to_end(&mut head)?;
        if head != MAGIC {
            input.read_to_end(&mut head)?;
            return Ok(Self::Legacy(head));
        }
        let mut reader = SnapshotReader {
            input,
            crc: crc32fast::Hasher::new(),
            tables: 0,
            rows: 0,
        };
        reader.crc.update(MAGIC);
        let version = u16::from_le_bytes(reader.take()?);
        if version != VERSION {
            return Err(invalid(format!(
                "snapshot format version {version}; this build reads version {VERSION}"
            )));
        }
        reader.tables = u16::from_le_bytes(reader.take()?);
        Ok(Self::Rows(reader))
    }
}

/// Reads one snapshot file's rows in order, then checks its trailer.
#[derive(Debug)]
pub struct SnapshotReader {
    input: BufReader<File>,
    crc: crc32fast::Hasher,
    tables: u16,
    rows: u64,
}

/// One row of a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub table: u8,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl SnapshotReader {
    /// How many data tables the writer had (fewer: an older build).
    pub fn tables(&self) -> u16 {
        self.tables
    }

    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.input.read_exact(&mut buf)?;
        self.crc.update(&buf);
        Ok(buf)
    }

    fn take_vec(&mut self, len: u32) -> io::Result<Vec<u8>> {
        if len > MAX_FIELD {
            return Err(invalid(format!("a snapshot field of {len} bytes")));
        }
        let mut buf = vec![0u8; len as usize];
        self.input.read_exact(&mut buf)?;
        self.crc.update(&buf);
        Ok(buf)
    }

    /// The next row, or `None` after the trailer has checked out.
    pub fn next_row(&mut self) -> io::Result<Option<Row>> {
        let [table] = self.take()?;
        if table == END {
            let rows = u64::from_le_bytes(self.take()?);
            let expected = self.crc.clone().finalize();
            let mut crc = [0u8; 4];
            self.input.read_exact(&mut crc)?;
            if rows != self.rows || u32::from_le_bytes(crc) != expected {
                return Err(invalid(format!(
                    "snapshot damaged: trailer says {rows} rows, read {}; checksum {}",
                    self.rows,
                    if u32::from_le_bytes(crc) == expected {
                        "matches"
                    } else {
                        "differs"
                    }
                )));
            }
            return Ok(None);
        }
        if u16::from(table) >= self.tables {
            return Err(invalid(format!(
                "snapshot row for table {table} of {}",
                self.tables
            )));
        }
        let key_len = u32::from_le_bytes(self.take()?);
        let value_len = u32::from_le_bytes(self.take()?);
        let key = self.take_vec(key_len)?;
        let value = self.take_vec(value_len)?;
        self.rows += 1;
        Ok(Some(Row { table, key, value }))
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &SnapshotDir, rows: &[(u8, &[u8], &[u8])]) -> PathBuf {
        let mut w = dir.writer(3).unwrap();
        for (t, k, v) in rows {
            w.row(*t, k, v).unwrap();
        }
        w.finish(dir, "T1-N1-7-42").unwrap()
    }

    fn read_all(path: &Path) -> io::Result<Vec<Row>> {
        let SnapshotContent::Rows(mut r) = SnapshotContent::open(File::open(path)?)? else {
            panic!("legacy")
        };
        assert_eq!(r.tables(), 3);
        let mut out = Vec::new();
        while let Some(row) = r.next_row()? {
            out.push(row);
        }
        Ok(out)
    }

    #[test]
    fn rows_come_back_in_order_and_a_damaged_or_truncated_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::beside(&tmp.path().join("state.redb")).unwrap();
        let path = write(&dir, &[(0, b"a", b"1"), (0, b"b", b""), (2, b"c", b"33")]);
        assert_eq!(path, dir.path_of("T1-N1-7-42"));
        assert_eq!(
            read_all(&path).unwrap(),
            [(0, "a", "1"), (0, "b", ""), (2, "c", "33")].map(|(table, k, v)| Row {
                table,
                key: k.into(),
                value: v.into()
            })
        );

        let bytes = fs::read(&path).unwrap();
        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 4 + 9] ^= 1; // inside the first key
        fs::write(&path, &flipped).unwrap();
        let err = read_all(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");

        fs::write(&path, &bytes[..bytes.len() - 6]).unwrap();
        let err = read_all(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }

    #[test]
    fn a_build_before_this_format_refuses_the_file_rather_than_misreading_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::beside(&tmp.path().join("state.redb")).unwrap();
        let rows: Vec<(u8, Vec<u8>, Vec<u8>)> = (0..2_000u32)
            .map(|i| ((i % 3) as u8, i.to_be_bytes().to_vec(), vec![b'v'; 40]))
            .collect();
        let mut w = dir.writer(3).unwrap();
        for (t, k, v) in &rows {
            w.row(*t, k, v).unwrap();
        }
        let bytes = fs::read(w.finish(&dir, "new").unwrap()).unwrap();
        // What the build before decoded a snapshot as.
        type Tables = Vec<Vec<(Vec<u8>, Vec<u8>)>>;
        let err = postcard::from_bytes::<Tables>(&bytes).unwrap_err();
        assert_eq!(err, postcard::Error::DeserializeBadVarint);
    }

    #[test]
    fn a_file_without_the_magic_is_a_legacy_snapshot_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("old");
        fs::write(&path, b"\x02\x01abc").unwrap();
        let SnapshotContent::Legacy(bytes) =
            SnapshotContent::open(File::open(&path).unwrap()).unwrap()
        else {
            panic!("read as this format")
        };
        assert_eq!(bytes, b"\x02\x01abc");
    }

    #[test]
    fn a_received_file_is_kept_under_its_id_and_ids_never_name_a_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::beside(&tmp.path().join("state.redb")).unwrap();
        let abandoned = dir.receiving().unwrap();
        drop(abandoned);
        let mut file = dir.receiving().unwrap();
        file.write_all(b"data").unwrap();
        let id = "../../etc/passwd";
        let kept = dir.keep_received(&file, id).unwrap();
        assert_eq!(kept.parent(), Some(dir.dir.as_path()));
        assert_eq!(fs::read(&kept).unwrap(), b"data");
        // Only the kept file remains: the abandoned one was removed.
        let names: Vec<_> = fs::read_dir(&dir.dir).unwrap().collect();
        assert_eq!(names.len(), 1);

        write(&dir, &[]);
        dir.remove_all_but("T1-N1-7-42").unwrap();
        assert!(!kept.exists());
        assert!(dir.path_of("T1-N1-7-42").exists());
        // A crash mid-write leaves a temp file; opening the directory again
        // removes it.
        let _half = dir.writer(3).unwrap();
        let reopened = SnapshotDir::beside(&tmp.path().join("state.redb")).unwrap();
        let names: Vec<_> = fs::read_dir(&reopened.dir).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
