//! One value per group with the undo every typed state needs: the value a
//! group had before the write group first changed it, put back in reverse.

/// Per group a `V` (its state: a count, a sum and how many values, ...).
pub struct Slots<V> {
    values: Vec<V>,
    saved: Vec<(usize, V)>,
}

impl<V: Copy + Default> Default for Slots<V> {
    fn default() -> Self {
        Slots {
            values: Vec::new(),
            saved: Vec::new(),
        }
    }
}

impl<V: Copy + Default> Slots<V> {
    pub fn resize(&mut self, groups: usize) {
        self.values.resize(groups, V::default());
    }

    pub fn get(&self, group: usize) -> V {
        self.values[group]
    }

    pub fn get_mut(&mut self, group: usize) -> &mut V {
        &mut self.values[group]
    }

    pub fn save(&mut self, group: usize) {
        self.saved.push((group, self.values[group]));
    }

    pub fn undo(&mut self) {
        for (group, value) in self.saved.drain(..).rev() {
            self.values[group] = value;
        }
    }

    pub fn forget(&mut self) {
        self.saved.clear();
    }

    pub fn reset(&mut self, group: usize) {
        self.values[group] = V::default();
    }

    pub fn size(&self) -> usize {
        self.values.capacity() * size_of::<V>() + self.saved.capacity() * size_of::<(usize, V)>()
    }

    pub fn undo_bytes(&self) -> usize {
        self.saved.len() * size_of::<(usize, V)>()
    }
}
