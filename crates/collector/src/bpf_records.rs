//! Decoding the eBPF ring: its records are already in oslens's layout, so only the names they
//! carry and the tree's new tasks are taken out here.

use crate::state::State;
use oslens_format::kernel as k;
use oslens_format::record::Record;

impl State {
    /// A record from the eBPF ring: already in oslens's layout but for the check byte; switch
    /// records carry both comms after it, fork records the child's.
    pub fn bpf_record(&mut self, b: &[u8]) {
        if b.len() < 32 {
            return;
        }
        let mut r = Record::from_bytes(&b[..32]);
        r.ts = r.ts.wrapping_add_signed(self.ts_offset);
        let cpu = if self.writers.contains_key(&(r.cpu as u32)) { r.cpu as u32 } else { *self.writers.keys().min().unwrap() };
        let comm = |o: usize| -> [u8; 16] {
            let mut c = [0u8; 16];
            if b.len() >= o + 16 {
                c.copy_from_slice(&b[o..o + 16]);
            }
            c
        };
        match r.kind {
            k::SWITCH => {
                self.note_comm(cpu, r.ts, r.id, comm(32));
                self.note_comm(cpu, r.ts, k::switch::F.next_tid.get(&r) as u32, comm(48));
            }
            k::FORK => {
                let child = k::fork::F.child_tid.get(&r) as u32;
                if !self.system_wide || self.traced.contains(&r.id) {
                    self.traced.insert(child);
                }
                self.note_comm(cpu, r.ts, child, comm(32));
            }
            k::EXEC => {
                let raw = &b[32..];
                let file = raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())].to_vec();
                self.emit(cpu, Record::new(r.ts, r.id, r.cpu, r.kind, r.a, r.b));
                self.exec_names(cpu, r.ts, r.id, &file);
                return;
            }
            k::IRQ_ENTRY => {
                let irq = k::irq_entry::F.irq.get(&r);
                if self.irq_names.insert(irq) {
                    let raw = &b[32.min(b.len())..];
                    let name = raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())].to_vec();
                    self.emit_name(cpu, r.ts, irq as u32, k::NAME_IRQ, &name);
                }
            }
            _ => {}
        }
        self.emit(cpu, Record::new(r.ts, r.id, r.cpu, r.kind, r.a, r.b));
    }
}
